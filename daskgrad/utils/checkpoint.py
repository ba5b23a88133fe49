"""Activation checkpointing, as ``torch.utils.checkpoint``: a region's intermediate values are not
kept for the backward; the backward runs the region again from its inputs when the gradient
reaches it.

daskgrad builds graphs lazily, and dask would give the region's second run the same keys as the
first (the same ops on the same inputs), so the scheduler would keep the first run's values for
the backward -- no checkpoint at all.  The second run therefore reads its inputs through a
pass-through layer with a new name that also waits for the incoming gradient: its keys are new,
and dask can run it only when the backward reaches the region, after the forward's values of the
region are freed.  Both runs are chunk-parallel tasks of the same single submission.

>>> from daskgrad.utils.checkpoint import checkpoint
>>> h = checkpoint(block, x, use_reentrant=False)
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings

import dask.array as da
from dask.base import tokenize

from .. import _dask as door, _tensor, graph
from .._modes import enable_grad, is_grad_enabled
from .._tensor import Tensor
from ..engine import grad
from ..function import Function
from ..ops import zeros_like
from . import revolve

__all__ = ["CheckpointError", "checkpoint", "checkpoint_sequential", "checkpoint_steps"]

_EXPLICIT = ("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in PyTorch "
             "2.9, calling checkpoint without use_reentrant will raise an exception. use_reentrant=False is "
             "recommended, but if you need to preserve the current default behavior, you can pass "
             "use_reentrant=True. Refer to docs for more details on the differences between the two variants.")
_EXPLICIT_SEQUENTIAL = (
    "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed explicitly. In "
    "version 2.9 we will raise an exception if use_reentrant is not passed. use_reentrant=False is recommended, "
    "but if you need to preserve the current default behavior, you can pass use_reentrant=True. Refer to docs "
    "for more details on the differences between the two variants.")
_DETERMINISM_CHECKS = ("default", "none")
_TIP = ("\nTip: the function given to checkpoint runs twice, once in the forward and again in the backward, "
        "and must record the same operations on tensors of the same shapes, dtypes and devices both times "
        "(state that changes between its calls -- a counter, a cache, a Python random draw -- breaks that).\n")


class CheckpointError(RuntimeError):
    """torch.utils.checkpoint.CheckpointError: the region's second run (in the backward) saved
    other tensors for backward than its first run did."""


def _noop_context_fn():
    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(function, *args, use_reentrant=None, context_fn=_noop_context_fn, determinism_check="default",
               debug=False, preserve_rng_state=True, **kwargs):
    """``function(*args, **kwargs)`` whose intermediate values are recomputed in the backward
    instead of kept, as ``torch.utils.checkpoint.checkpoint``.

    Both variants give the same gradients here (daskgrad has one engine); they keep torch's
    argument checks: ``use_reentrant=True`` takes no keyword arguments for ``function``, nor
    ``context_fn``/``debug``.  ``preserve_rng_state``: the second run draws the same random
    numbers (a dropout mask) as the first.  ``context_fn``'s second context manager is entered
    around the second run, as torch's.

    ``determinism_check="default"`` (non-reentrant variant, as torch's): the second run must save
    as many tensors for backward as the first, of the same shapes, dtypes and devices, or the
    backward raises :class:`CheckpointError` with torch's text -- on the client, before anything
    is submitted, since the second run is only recorded.  ``"none"`` skips the metadata part, not
    the count.  Where torch's default early stop would cut a second run that saves *more* short
    and back-propagate through the first run's graph, daskgrad (which back-propagates through
    the second run) raises torch's early-stop-off error.
    """
    if use_reentrant is None:
        warnings.warn(_EXPLICIT, UserWarning, stacklevel=2)
        use_reentrant = True
    if use_reentrant:
        if context_fn is not _noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", UserWarning,
                          stacklevel=2)
    elif determinism_check not in _DETERMINISM_CHECKS:
        raise ValueError(f"determinism_check should be one of {list(_DETERMINISM_CHECKS)}, but got "
                         f"{determinism_check}")
    run = functools.partial(function, **kwargs) if kwargs else function
    if not is_grad_enabled():  # nothing is recorded, so nothing is kept: just run it
        return run(*args)
    forward_context, recompute_context = context_fn()
    rng = _tensor._rng.bit_generator.state if preserve_rng_state else None
    with forward_context:
        outs, leaves, saved = _first_run(run, args)
    if use_reentrant and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        leaves = []  # torch's reentrant variant: no input requires grad, no gradient (parameters' neither)
    # torch checks the second run only in the non-reentrant variant: the count always, the metadata
    # unless determinism_check="none"
    saved = None if use_reentrant else [_metadata(t) if determinism_check == "default" else None for t in saved]
    region = _Region(run, rng, recompute_context, outs, len(args), saved)
    return CheckpointFunction.apply(region, *args, *leaves)


def _first_run(run, args):
    """The region run once, recorded, on stand-ins of its inputs: its outputs (detached), and the
    leaves it reads besides them (a module's parameters), which must get gradients too.

    Running it here rather than without recording costs building the graph once more (nothing
    is computed); it finds the parameters, as torch's hooks do.  A tensor made outside the region
    that requires grad and is read inside (a closure) cannot be found that way: refused."""
    start = next(graph._made)
    stand_ins = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in args]
    own = {id(t) for t in stand_ins if isinstance(t, Tensor)}
    with enable_grad(), graph.watch_saved() as saved:
        outs = run(*stand_ins)
    leaves = _leaves_read(outs, own, start)

    def detach(o):
        return o.detach() if isinstance(o, Tensor) else o

    return (tuple(map(detach, outs)) if isinstance(outs, tuple) else detach(outs)), leaves, saved


def _leaves_read(outs, own, start, who="checkpoint: the function",
                 fix="pass that tensor as an argument of checkpoint"):
    """The leaves requiring grad that the graph of ``outs`` (recorded since node ``start``) reads,
    besides the tensors ``own`` (ids); a non-leaf made before ``start`` is refused."""
    leaves, seen = {}, set()
    stack = [o.grad_fn for o in (outs if isinstance(outs, tuple) else (outs,))
             if isinstance(o, Tensor) and o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, graph.AccumulateGrad):
            if id(node.variable) not in own:
                leaves.setdefault(id(node.variable), node.variable)
        elif node._seq < start:
            raise RuntimeError(
                f"{who} reads a tensor made outside it that requires grad (its grad_fn is {node.name()}); {fix}")
        else:
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return list(leaves.values())


def _metadata(t):
    """What torch's ``determinism_check="default"`` compares of a saved tensor: shape, dtype, device
    (an unknown length, NaN, equal to itself)."""
    shape = tuple(None if isinstance(n, float) and math.isnan(n) else n for n in t.shape)
    return shape, str(t.dtype), t.device


def _metadata_repr(meta):
    shape, dtype, device = meta
    size = graph.size_repr(["nan" if n is None else n for n in shape]).replace("'nan'", "nan")
    return f"{{'shape': {size}, 'dtype': daskgrad.{dtype}, 'device': {device!r}}}"


class _Region:
    """What the backward needs to run the region again: the function, the random state it started
    with, the context to run it in; the first run's outputs, for the forward to hand on; and what
    the first run saved for backward (metadata, or None per tensor where determinism_check="none";
    None in the reentrant variant, which torch does not check)."""

    def __init__(self, run, rng, context, outs, n_args, saved=None):
        self.run, self.rng, self.context, self.outs, self.n_args = run, rng, context, outs, n_args
        self.saved = saved

    def again(self, *args):
        """The region's second run, recorded; raises :class:`CheckpointError` (before anything is
        submitted: the run is only recorded) where it saves other tensors than the first run."""
        with graph.watch_saved() as saved, self._first_rng(), self.context:
            outs = self.run(*args)
        self._check(saved)
        return outs

    @contextlib.contextmanager
    def _first_rng(self):
        """daskgrad's random state as the first run began (preserve_rng_state), restored after."""
        if self.rng is None:
            yield
            return
        now = _tensor._rng.bit_generator.state
        _tensor._rng.bit_generator.state = self.rng
        try:
            yield
        finally:
            _tensor._rng.bit_generator.state = now

    def _check(self, saved):
        """torch's checks of the second run (``_checkpoint_hook`` and ``check_recomputed_tensors_match``).

        daskgrad records the whole second run (it is lazy: nothing runs while it is recorded), so a
        second run that saves more tensors is refused as torch refuses it with early stopping off;
        torch's default early stop would cut the second run short and silently back-propagate
        through the first run's graph instead."""
        if self.saved is None:
            return
        if len(saved) > len(self.saved):
            raise CheckpointError("torch.utils.checkpoint: trying to save more tensors during recomputation than "
                                  "during the original forward pass.\n" + _TIP)
        if len(saved) < len(self.saved):
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the original forward and "
                f"recomputation.\nNumber of tensors saved during forward: {len(self.saved)}\nNumber of tensors "
                f"saved during recomputation: {len(saved)}.\n{_TIP}")
        different = [(i, meta, _metadata(t)) for i, (meta, t) in enumerate(zip(self.saved, saved))
                     if meta is not None and meta != _metadata(t)]
        if different:
            listed = "".join(f"tensor at position {i}:\nsaved metadata: {_metadata_repr(a)}\n"
                             f"recomputed metadata: {_metadata_repr(b)}\n" for i, a, b in different)
            raise CheckpointError("torch.utils.checkpoint: Recomputed values for the following tensors have "
                                  f"different metadata than during the forward pass.\n{listed}.\n{_TIP}")


class CheckpointFunction(Function):
    """The checkpointed region as one node (``CheckpointFunctionBackward``, torch's name); its
    inputs are the region's arguments and then the leaves it reads (parameters)."""

    @staticmethod
    def forward(ctx, region, *inputs):
        ctx.region = region
        ctx.positions = [i for i, a in enumerate(inputs) if isinstance(a, Tensor)]
        ctx.others = inputs
        ctx.save_for_backward(*(inputs[i] for i in ctx.positions))
        outs, region.outs = region.outs, None  # handed on once; the node keeps no values
        return outs

    @staticmethod
    def backward(ctx, *grad_outputs):
        create_graph = is_grad_enabled()  # the engine runs a rule with grad mode = create_graph
        gate = next(g for g in grad_outputs if g is not None)
        inputs, n = list(ctx.others), ctx.region.n_args
        for i, saved in zip(ctx.positions, ctx.saved_tensors):
            if i >= n:
                inputs[i] = saved  # a parameter: read as it is, its gradient wanted
            elif create_graph and saved.requires_grad:  # a double backward differentiates the second
                inputs[i] = _After.apply(saved, gate)   # run with respect to the inputs themselves
            else:
                inputs[i] = _after(saved, gate)
        with enable_grad():
            outs = ctx.region.again(*inputs[:n])
        outs = outs if isinstance(outs, tuple) else (outs,)
        pairs = [(o, g) for o, g in zip(outs, grad_outputs) if isinstance(o, Tensor) and o.requires_grad
                 and g is not None]
        wanted = [i for i in ctx.positions if inputs[i].requires_grad]
        # a parameter's hooks run once, when the outer backward reaches it, not in this inner grad too
        params = [inputs[i] for i in wanted if i >= n]
        hooks = [p._hooks for p in params]
        for p in params:
            p._hooks = {}
        try:
            grads = grad([o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs],
                         allow_unused=True, create_graph=create_graph, lazy=True) if pairs and wanted else [None] * len(
                wanted)
        finally:
            for p, h in zip(params, hooks):
                p._hooks = h
        out = [None] * (1 + len(inputs))
        for i, g in zip(wanted, grads):
            out[1 + i] = g
        return tuple(out)


def _pass(block, gate):
    return block


def _after(t, gate):
    """``t``'s values under new keys, computed once the cotangent ``gate`` exists: the region's
    second run gets keys of its own and waits for the backward to reach it."""
    g = gate.array
    first = g.blocks[(0,) * g.ndim] if g.ndim else g
    tiny = first.ravel()[:1].sum()  # one element of one chunk of the gradient: a cheap dependency
    return _waiting(t, tiny)


def _waiting(t, tiny):
    """``t``'s values under new keys, each chunk's task depending on the dask scalar ``tiny``."""
    a = t.detach().array
    index = tuple(range(a.ndim))
    arr = da.blockwise(_pass, index, a, index, tiny, (), dtype=a.dtype, meta=a._meta,
                       name="recompute-" + tokenize(a, tiny))
    return Tensor._make(arr, requires_grad=t.requires_grad)


class _After(Function):
    """:func:`_after` recorded as the identity of the input, for a double backward."""

    @staticmethod
    def forward(ctx, t, gate):
        return _after(t, gate)

    @staticmethod
    def backward(ctx, g):
        return g, None


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """``functions`` (an ``nn.Sequential`` or a list of modules/functions) run in ``segments``
    pieces, each checkpointed but the last, as ``torch.utils.checkpoint.checkpoint_sequential``."""
    if use_reentrant is None:
        warnings.warn(_EXPLICIT_SEQUENTIAL, UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))

    def run_function(start, end, functions):
        def forward(input):
            for j in range(start, end + 1):
                input = functions[j](input)
            return input
        return forward

    if hasattr(functions, "children") and callable(functions.children):  # nn.Sequential
        functions = list(functions.children())
    segment_size = len(functions) // segments
    end = -1  # the last segment runs without a checkpoint: its values are used at once
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end, functions), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1, functions)(input)


# ------------------------------------------------------------------ checkpointed time stepping
def checkpoint_steps(step, state, steps, *, snapshots):
    """``steps`` time steps ``state = step(state, i)`` for ``i = 0 .. steps - 1`` whose backward
    holds at most ``snapshots`` states (the initial one included) and recomputes the others,
    following Revolve's binomial schedule (:mod:`daskgrad.utils.revolve`).

    ``state`` is a tensor or a tuple of tensors (a wave equation's ``(u_prev, u)``); ``step``
    returns the same structure and may read leaves requiring grad (a velocity model, a source
    term's parameters), which get the gradient summed over all steps.  Returns the final state,
    recorded: ``loss(checkpoint_steps(...)).backward()`` gives the uncheckpointed gradients.

    Schedule: the pure binomial one (Griewank & Walther, Revolve), all snapshots in (cluster)
    memory.  It is optimal among schedules that store states -- the fewest forward steps,
    ``t(steps, snapshots) = r * steps - C(snapshots + r, r - 1)`` with ``r`` the smallest integer
    with ``C(snapshots + r, r) >= steps`` (:func:`daskgrad.utils.revolve.repetitions`) -- and its
    memory, ``snapshots`` states + one step's values, does not grow with ``steps``.  Multi-level
    (disk) schedules are left to dask's spilling to disk, which moves the held snapshots out of a
    worker's memory when it runs short.  Each step also runs once recorded as part of its own
    reversal (what a plain backward keeps instead); so forward steps total ``t + 1`` (the
    forward sweep, the recomputations, the last step), recorded re-runs ``steps - 1``.

    Like :func:`checkpoint`, each recomputation reads its snapshot through a pass-through that
    waits for every chunk of the adjoint where the schedule stands (and of the leaves' gradients
    so far): dask cannot run it sooner, so it holds what Revolve holds.  Each step's reversal reads
    the adjoint through one that waits for the step's state (:func:`_after_state`): the adjoint of
    a step linear in the state reads no state, and workers would run it ahead and hold it.  A value
    ``step`` makes that depends on no state (a dense source term ``wavelet[i] * src``, also through
    a stencil or a slicing) is rebuilt under new keys waiting for the state it meets
    (:func:`_gated`); otherwise dask would compute every step's at the start and hold them.
    Forward and backward are one submission.  A double backward through it is not supported.
    """
    states = _check_steps(step, state, steps, snapshots)
    single = isinstance(state, Tensor)

    def call(s, i):
        out = step(s[0] if single else s, i)
        return _as_state(out, single, len(s), i)

    if steps == 0:
        return state
    if steps == 1 or not is_grad_enabled():
        cur = states
        for i in range(steps):
            cur = call(cur, i)
        return cur[0] if single else cur
    start = next(graph._made)
    stand_ins = tuple(t.detach().requires_grad_(t.requires_grad) for t in states)
    with enable_grad():
        first = call(stand_ins, 0)  # recorded once, to find the leaves step reads (nothing runs)
    leaves = _leaves_read(first, {id(t) for t in stand_ins}, start, *_STEP_READS)
    shared = frozenset(name for t in first for name in t.array.dask.layers)

    def advance(s, i):  # unrecorded steps (the sweep, the recomputations): per-step values wait for state i
        return _gated(s, call(s, i), shared, i)

    plan = _Plan(call, advance, revolve.schedule(steps, snapshots), tuple(t.detach() for t in first), leaves)
    plan.shared = shared
    mid = _Steps.apply(plan, *states, *leaves)
    mid = (mid,) + tuple(_Component.apply(plan, k, mid) for k in range(1, len(states)))
    out = call(mid, steps - 1)  # recorded: Revolve's "firsturn"
    return out[0] if single else out


_STEP_READS = ("checkpoint_steps: step", "make it a leaf (t.detach().requires_grad_()) or compute it inside step")


def _check_steps(step, state, steps, snapshots):
    """torch.utils' wording for bad counts; the state's type as torch's argument parser words it."""
    if isinstance(snapshots, bool) or not isinstance(snapshots, int) or snapshots <= 0:
        raise ValueError(f"snapshots should be a positive integer value, but got snapshots={snapshots}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps should be a non-negative integer value, but got steps={steps}")
    if not callable(step):
        raise TypeError(f"'{type(step).__name__}' object is not callable")
    if isinstance(state, Tensor):
        return (state,)
    if not isinstance(state, tuple) or not state:
        raise TypeError(f"checkpoint_steps(): argument 'state' (position 2) must be Tensor or tuple of Tensors, "
                        f"not {type(state).__name__}")
    for k, t in enumerate(state):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {k} in argument 'state', but got {type(t).__name__}")
    return state


def _as_state(out, single, n, i):
    out = (out,) if single and isinstance(out, Tensor) else out
    if not isinstance(out, tuple) or len(out) != n or not all(isinstance(t, Tensor) for t in out):
        want = "a Tensor" if single else f"a tuple of {n} Tensors"
        raise TypeError(f"checkpoint_steps: step must return a state like the one it is given ({want}), but step "
                        f"{i} returned {type(out).__name__}")
    return out


class _Plan:
    """What ``_Steps`` runs: ``call(state, i)`` (recorded in a reversal), ``advance(state, i)`` (the
    same step unrecorded, its per-step values waiting for the state: :func:`_gated`), the Revolve
    actions, state 1 (from the run that found the leaves), and those leaves."""

    def __init__(self, call, advance, actions, first, leaves):
        k = next(j for j, a in enumerate(actions) if isinstance(a, revolve.Reverse))
        self.call, self.advance, self.first, self.leaves = call, advance, first, leaves
        self.sweep, self.rest = actions[:k], actions[k + 1:]
        self.n = len(first)


class _Steps(Function):
    """Steps ``0 .. steps - 2`` as one node: the forward sweep holds Revolve's snapshots (saved for
    the backward); the backward runs the rest of the schedule.  Inputs: the plan, the state's
    tensors, the leaves step reads."""

    @staticmethod
    def forward(ctx, plan, *inputs):
        snaps, cur, pos = {}, plan.first, 1
        for a in plan.sweep:
            if isinstance(a, revolve.Takeshot):
                snaps[a.index] = inputs[:plan.n] if a.index == 0 else cur
            else:  # the sweep only advances and stores
                for i in range(pos, a.stop):
                    cur = plan.advance(cur, i)
                pos = a.stop
        ctx.plan, ctx.where = plan, {p: j * plan.n for j, p in enumerate(snaps)}
        ctx.save_for_backward(*(t for s in snaps.values() for t in s))
        plan.last, plan.grads = cur, {}
        return cur[0]

    @staticmethod
    def backward(ctx, *adjoint):
        if is_grad_enabled():
            raise RuntimeError("checkpoint_steps: a double backward (create_graph=True) through it is not supported")
        plan, saved = ctx.plan, ctx.saved_tensors
        snaps = {p: saved[j:j + plan.n] for p, j in ctx.where.items()}
        adjoint = list(adjoint) + [plan.grads.pop(k, None) for k in range(1, plan.n)]
        total, cur, fresh = [None] * len(plan.leaves), None, False
        for a in plan.rest:
            if all(g is None for g in adjoint):
                break
            if isinstance(a, revolve.Restore):
                cur, fresh = snaps[a.index], True
                continue
            if isinstance(a, revolve.Takeshot):
                snaps[a.index] = cur
                continue
            if fresh:  # a recomputation starts: it waits for the backward to have passed this point
                gate = _every_chunk(adjoint + total)
                cur, fresh = tuple(_waiting(t, gate) for t in cur), False
            if isinstance(a, revolve.Advance):
                for i in range(a.start, a.stop):
                    cur = plan.advance(cur, i)
            else:
                adjoint, got = _reverse_step(plan, cur, a.index, adjoint)
                total = [g if t is None else t if g is None else t + g for t, g in zip(total, got)]
        needs = ctx.needs_input_grad
        return (None, *(g if needs[1 + k] else None for k, g in enumerate(adjoint)), *total)


class _Component(Function):
    """Component ``k`` of a tuple state out of ``_Steps`` (whose node has one output, component 0:
    a node with several outputs would pack them into one flat array, copying a whole state).
    Its backward hands the gradient to ``_Steps``'s through the plan, and zeros to component 0,
    so that ``_Steps``'s backward runs after it even where component 0 gets no gradient."""

    @staticmethod
    def forward(ctx, plan, k, anchor):
        ctx.plan, ctx.k, ctx.zero = plan, k, zeros_like(anchor)  # zeros read no values: no dependency
        return plan.last[k].detach()

    @staticmethod
    def backward(ctx, g):
        ctx.plan.grads[ctx.k] = g
        return None, None, ctx.zero


def _reverse_step(plan, cur, i, adjoint):
    """Step ``i`` recorded from state ``i`` and its VJP: the adjoint of state ``i``, and the
    leaves' gradients from this step."""
    x = tuple(t.detach().requires_grad_() for t in cur)
    start = next(graph._made)
    with enable_grad():
        y = plan.call(x, i)
    known = {id(v) for v in plan.leaves}
    if any(id(v) not in known for v in _leaves_read(y, {id(t) for t in x}, start, *_STEP_READS)):
        raise RuntimeError(f"checkpoint_steps: step {i} reads a leaf tensor requiring grad that step 0 does not "
                           f"read; step must read the same leaves at every step")
    pairs = [(o, _after_state(g, cur)) for o, g in zip(y, adjoint) if g is not None and o.requires_grad]
    wanted = list(x) + list(plan.leaves)
    if not pairs:
        return [None] * len(x), [None] * len(plan.leaves)
    got = list(grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True, lazy=True))
    # values of the recorded step that depend on no state wait for it here too (a VJP reading them)
    given = tuple(x) + tuple(g for g in adjoint if g is not None)
    have = [k for k, g in enumerate(got) if g is not None]
    for k, g in zip(have, _gated(given, tuple(got[k] for k in have), plan.shared, i)):
        got[k] = g
    return got[:len(x)], got[len(x):]


def _gated(state, out, shared, i):
    """Step ``i``'s outputs ``out`` from ``state``, where values the step makes that depend on no
    state (a dense source term ``wavelet[i] * src``) wait for every chunk of ``state``.

    Such a value is ready from the start of the submission, and has the same key in the forward
    sweep, in each recomputation and in the step's reversal: dask would compute every step's at
    once and hold each until its last use -- memory growing with the steps, which the schedule
    exists to bound.  Those values, and what the step computes from them, are rebuilt under new
    keys (:func:`daskgrad._dask.stateless_waiting`), the values' tasks waiting for one element of
    each chunk of ``state``; the step's other layers, the state's, and step 0's (``shared``: the leaves
    and constants every step reads) keep theirs; the values may reach the outputs through any
    ops (elementwise, a stencil, a slicing).  A step made only of state-dependent values is
    returned as it is."""
    names = {t.array.name for t in state}
    fresh = [k for k, t in enumerate(out) if t.array.name not in names]
    bound = door.stateless_waiting([out[k].array for k in fresh], names, shared, lambda: _every_chunk(state), i)
    if bound is None:
        return out
    out = list(out)
    for k, a in zip(fresh, bound):
        out[k] = Tensor._make(a, requires_grad=False)
    return tuple(out)


def _pass_first(block, *gates):
    return block


def _after_state(g, state):
    """The adjoint ``g`` entering a step's reversal, under new keys that wait for ``state`` (the
    state the step runs from): each chunk for the same chunk of every component where the chunks
    line up, for all of ``state`` otherwise.

    Where the step is linear in the state (a wave equation's ``2 u - u_prev + c^2 lap(u)``) the
    adjoint chain reads no state: on a cluster, idle workers ran it through every step long before
    the recomputations reached those steps, and each step's adjoint was held until its state came
    to meet it (in the leaves' gradient, ``g * lap(u)``): 22.5 of the 25.5 state chunks the busiest
    of 4 workers held at its peak (24 steps, 3 snapshots).  Waiting for the state puts the adjoint
    back in the schedule's order: it runs when its step's state does."""
    a = g.array
    index = tuple(range(a.ndim))
    if all(t.chunks == a.chunks for t in state):
        marks = [x for t in state for x in (door.marks_of(t.array), index)]
        arr = da.blockwise(_pass_first, index, a, index, *marks, dtype=a.dtype, meta=a._meta, align_arrays=False,
                           name="adjoint-" + tokenize(a, *marks[::2]))
        return Tensor._make(arr, requires_grad=False)
    return _waiting(g, _every_chunk(state))


def _every_chunk(tensors):
    """A dask scalar that exists once every chunk of ``tensors`` does (:func:`daskgrad._dask.gate`).

    The recomputation waits for all of the adjoint and of the leaves' gradients so far, not one
    chunk: with a tuple state, one component's adjoint can be ready long before the others (a wave
    equation's ``u_prev``), and dask would run later recomputations, holding their values, ahead
    of the adjoint chain."""
    return door.gate([t.array for t in tensors if t is not None])
