"""Activation checkpointing, as ``torch.utils.checkpoint``: a region's intermediate values are not
saved for the backward; the backward runs the region again from its inputs when the gradient
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
import numpy as np
from dask.base import tokenize

from .. import _dask as door, _tensor, graph
from .._modes import enable_grad, is_grad_enabled, no_grad
from .._tensor import Tensor, recorded
from ..compiler import _python_draws as door_python_draws, recording as door_recording
from ..engine import grad
from ..function import Function
from ..ops import concatenate, rechunk, stack, zeros_like
from . import revolve

__all__ = ["CheckpointError", "auto_unroll", "checkpoint", "checkpoint_sequential", "checkpoint_steps", "scan"]

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
    instead of saved, as ``torch.utils.checkpoint.checkpoint``.

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
    if not is_grad_enabled():  # nothing is recorded, so nothing is saved: just run it
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
    """The region run once, recorded, on detached copies of its inputs: its outputs (detached), and the
    leaves it reads besides them (a module's parameters), which must get gradients too.

    Running it here rather than without recording costs building the graph once more (nothing
    is computed); it finds the parameters, as torch's hooks do.  A tensor made outside the region
    that requires grad and is read inside (a closure) cannot be found that way: refused."""
    start = next(graph._made)
    inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in args]
    own = {id(t) for t in inputs if isinstance(t, Tensor)}
    with enable_grad(), graph.watch_saved() as saved:
        outs = run(*inputs)
    leaves = _leaves_read(outs, own, start)

    def detach(o):
        return o.detach() if isinstance(o, Tensor) else o

    return (tuple(map(detach, outs)) if isinstance(outs, tuple) else detach(outs)), leaves, saved


def _leaves_read(outs, own, start, who="checkpoint: the function",
                 fix="pass that tensor as an argument of checkpoint", returned=False):
    """The leaves requiring grad that the graph of ``outs`` (recorded since node ``start``) reads,
    besides the tensors ``own`` (ids); a non-leaf made before ``start`` is refused.  ``returned``: a
    leaf among ``outs`` counts too (a time step's state component that is a leaf itself)."""
    leaves, seen = {}, set()
    stack = [o.grad_fn if o.grad_fn is not None else graph.edge(o) if returned else None
             for o in (outs if isinstance(outs, tuple) else (outs,)) if isinstance(o, Tensor)]
    stack = [n for n in stack if n is not None]
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
def checkpoint_steps(step, state, steps, *, snapshots, xs=None, unroll=1):
    """``steps`` time steps ``state = step(state, i)`` for ``i = 0 .. steps - 1`` (or, with ``xs``,
    ``state = step(state, xs[i])``: each step's own data, a row of ``xs``, as ``jax.lax.scan``'s)
    whose backward holds at most ``snapshots`` states (the initial one included) and recomputes
    the others, following Revolve's binomial schedule (:mod:`daskgrad.utils.revolve`).

    ``state`` is a tensor or a tuple of tensors (a wave equation's ``(u_prev, u)``); ``step``
    returns the same structure and may read leaves requiring grad (a velocity model, a source
    term's parameters), which get the gradient summed over all steps, and ``xs`` may require grad
    (each row gets its step's).  Returns the final state, recorded: ``loss(checkpoint_steps(...)).backward()``
    gives the uncheckpointed gradients.

    ``step`` is recorded once, on aliases of the state (without ``xs``, once per step, forward
    only: steps recorded the same share one body), into a program lowered to dask once and
    instantiated for every step (:mod:`daskgrad._dask.scan`): the work on the client per step is a
    renaming of that program's keys.  It must do what every step does: computing a value inside
    (``.item()``), writing a tensor it did not make in place or drawing random numbers is refused.

    Schedule: the pure binomial one (Griewank & Walther, Revolve), all snapshots in (cluster)
    memory.  It is optimal among schedules that store states -- the fewest forward steps,
    ``t(steps, snapshots) = r * steps - C(snapshots + r, r - 1)`` with ``r`` the smallest integer
    with ``C(snapshots + r, r) >= steps`` (:func:`daskgrad.utils.revolve.repetitions`) -- and its
    memory, ``snapshots`` states + one step's values, does not grow with ``steps``.  Snapshots
    beyond memory are left to dask's spilling to disk.  The states made are ``t + 1`` steps'
    worth (the forward sweep, the recomputations, the last step); each step's reversal also runs
    the step from its state to apply its VJP.  Each recomputation waits for every chunk of the
    adjoint where the schedule stands, each reversal's adjoint for its step's state, and a value
    a step makes from its own data alone (a dense source term ``xs[i] * src``) for the step's
    state, so dask cannot run them early and hold them; what a step makes from leaves and
    constants alone (``c ** 2``) is computed once for all steps.  Forward and backward are one
    submission.  A double backward through it is not supported.

    ``unroll=K`` (as ``jax.lax.scan``'s): ``K`` steps make one body, recorded once and run as one time
    step of the loop, so a chunk whose step reads no other chunk (a shot's whole grid) advances ``K``
    steps in one task, and a step's handing on of its state between tasks is paid once per ``K`` steps
    (the tutorial FWI gradient: 85 tasks a step at ``K = 1``, 16 at ``K = 10``).  Revolve's schedule is
    then over blocks of ``K`` steps: ``snapshots`` counts states at block boundaries, and a block's
    reversal holds its ``K`` steps' values, recomputed from its first state.  The steps past the last
    whole block run as a loop of their own, with at most as many snapshots (held beside the blocks').
    The gradients are the unrolled loop's (summed in another order: equal to rounding).
    ``unroll="auto"`` chooses ``K`` from the state's chunks (:func:`auto_unroll`).
    """
    states = _check_steps(step, state, steps, snapshots)
    unroll = _check_unroll(unroll, states, steps)
    single = isinstance(state, Tensor)
    if xs is not None:
        xs = _check_xs(xs, steps)
    if steps == 0:
        return state
    if unroll > 1:
        return _in_blocks(checkpoint_steps, step, state, steps, xs, unroll, snapshots=snapshots)
    out = _run(step, states, steps, snapshots, xs, single, ys=False)
    return out[0] if single else out


def scan(f, init, xs=None, length=None, *, snapshots=None, unroll=1):
    """JAX's ``lax.scan``: ``carry, y = f(carry, x)`` for each row ``x`` of ``xs`` (or ``length``
    times with ``x`` None), returning the final carry and the ``y`` of every step stacked along a new
    first axis (``None`` where ``f`` returns ``None``; a tuple of tensors for a tuple).  ``carry`` is a
    tensor or a tuple of tensors, as :func:`checkpoint_steps`'s state.  ``f`` is recorded once and
    instantiated for every step (:mod:`daskgrad._dask.scan`); its backward saves every step's
    carry, or, with ``snapshots``, at most that many, recomputing the rest (Revolve's schedule).
    ``unroll=K``: ``K`` steps a body, as :func:`checkpoint_steps`'s (``snapshots`` then counts block
    boundaries; ``"auto"``: :func:`auto_unroll`'s ``K``).

    >>> import daskgrad as dg
    >>> from daskgrad.utils.checkpoint import scan
    >>> xs = dg.arange(1.0, 6.0).reshape(5, 1)
    >>> total, partial = scan(lambda c, x: (c + x, c * 1.0), dg.zeros(1), xs)
    >>> total.item(), partial.reshape(-1).tolist()
    (15.0, [0.0, 1.0, 3.0, 6.0, 10.0])
    """
    if xs is None and length is None:
        raise ValueError("scan got no xs and no length: the number of steps is unknown")
    first = (xs[0] if isinstance(xs, tuple) and xs else xs) if xs is not None else None
    steps = length if first is None else (first.shape[0] if isinstance(first, Tensor) and first.ndim else -1)
    if first is not None and length is not None and steps != length:
        raise ValueError(f"scan got an xs of {steps} steps and length={length}")
    states = _check_steps(f, init, steps, snapshots or max(steps, 1))
    unroll = _check_unroll(unroll, states, steps)
    single = isinstance(init, Tensor)
    if xs is not None:
        xs = _check_xs(xs, steps)
    if steps == 0:
        raise ValueError("scan of zero steps has no per-step outputs to stack")
    if unroll > 1:
        return _in_blocks(scan, f, init, steps, xs, unroll, snapshots=snapshots)
    if xs is None:  # (jax's: x is None at every step, not the step's index as checkpoint_steps' step gets)
        f = _without_index(f)
    out = _run(f, states, steps, snapshots or steps, xs, single, ys=True)
    n = len(states)
    carry = out[0] if single else tuple(out[:n])
    ys = out[n:]
    shape = out.ys_structure
    return carry, None if shape is None else ys[0] if shape == "tensor" else tuple(ys)


class _Outs(tuple):
    """A loop's outputs, the final carry then the stacked per-step outputs (``ys_structure``: None,
    ``"tensor"`` or ``"tuple"``: what ``f`` returned as its ``y``)."""


def _run(step, states, steps, snapshots, xs, single, ys):
    loop = _Loop.trace(step, states, steps, xs, single, want_grad=is_grad_enabled(), ys=ys)
    if not is_grad_enabled() or not loop.differentiable:
        out = _Outs(loop.forward_tensors())
    else:
        schedule = _Schedule(loop, revolve.schedule(steps, snapshots))
        inputs = (*states, *loop.leaves) + (loop.xs if loop.x_grad else ())
        token = graph.guard(_Scan.apply(schedule, *inputs), *loop.guarded)
        loop.guarded = ()  # (the guard holds versions, not the tensors)
        out = _Outs(_Component.apply(schedule, k, token) if k >= schedule.n or loop.last_requires_grad[k]
                    else _Component.apply(schedule, k, token).detach() for k in range(schedule.n + loop.n_ys))
    out.ys_structure = loop.ys_structure
    return out


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


def _check_unroll(unroll, states, steps):
    """``unroll`` as a number of steps a body (``"auto"``: :func:`auto_unroll`'s)."""
    if unroll == "auto" and isinstance(unroll, str):
        return auto_unroll(states, steps)
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        raise ValueError(f"unroll should be a positive integer value or 'auto', but got unroll={unroll!r}")
    return unroll


UNROLL_BYTES = 16 * 2 ** 20  # what a block's K states of one chunk may hold (a cache's size, not memory's)
MAX_UNROLL = 32  # past this a block's trace (K steps recorded) costs more than the tasks it saves


def auto_unroll(state, steps):
    """The ``K`` that ``unroll="auto"`` runs ``steps`` steps of ``state`` (a tensor or a tuple of
    tensors) with: as many steps as a block's reversal can hold states of one chunk within
    ``UNROLL_BYTES`` (16 MiB: the largest chunk of each component, summed), at most ``MAX_UNROLL``
    and ``steps``; among the ``K`` from half that down to it, the largest that divides ``steps``
    where one does (the steps past the last whole block are a loop of their own, traced apart).

    Measured on the tutorial FWI gradient (200 steps, snapshots 14, one chunk a shot: 1.1 MB of
    state a chunk; 2 cores): ``K`` = 1, 5, 10, 20, 40 took 7.1, 4.7, 3.9, 4.4, 5.1 s; this picks 10.
    The chunks' sizes decide, not a halo's: a step that reads neighbouring chunks still exchanges
    their edges every step inside a block (a block saves tasks and client work, not those exchanges).

    >>> import daskgrad as dg
    >>> from daskgrad.utils.checkpoint import auto_unroll
    >>> u = dg.zeros((5, 261, 261), dtype="float64", chunks=(1, 261, 261))
    >>> auto_unroll((u, u, dg.zeros(5, dtype="float64", chunks=1)), 200)
    10
    """
    parts = (state,) if isinstance(state, Tensor) else tuple(state)
    per_step = 0
    for t in parts:
        if isinstance(t, Tensor):
            size = math.prod(max(c, default=0) for c in t.chunks) * t.dtype.itemsize
            per_step += int(size) if size == size else 0  # (NaN: unknown sizes count as none)
    most = max(1, min(steps, MAX_UNROLL, UNROLL_BYTES // max(per_step, 1)))
    whole = [k for k in range(most, max(1, (most + 1) // 2) - 1, -1) if steps % k == 0]
    return whole[0] if whole else most


def _in_blocks(loop, step, state, steps, xs, unroll, **options):
    """``loop`` (:func:`checkpoint_steps` or :func:`scan`) of ``steps`` steps as a loop of ``steps // unroll``
    blocks of ``unroll`` steps (each block one body: ``step`` applied ``unroll`` times, its own data
    the block's ``unroll`` rows of ``xs``), then a loop of the steps left over.  A scan's per-step
    outputs are stacked in each block and the blocks' joined back into one row a step."""
    blocks, left = divmod(steps, unroll)
    scanning = loop is scan
    if blocks == 0:
        return loop(step, state, xs, steps, **options) if scanning else loop(step, state, steps, xs=xs, **options)
    parts = None if xs is None else xs if isinstance(xs, tuple) else (xs,)

    def rows(x):  # each step's own data in a block: its rows of xs, its index i, or None (a scan's)
        if parts is not None:
            return [tuple(p[j] for p in x) if isinstance(xs, tuple) else x[j] for j in range(unroll)]
        return [None] * unroll if scanning else [x * unroll + j for j in range(unroll)]

    single = isinstance(state, Tensor)
    n = 1 if single else len(state)

    def block(carry, x):
        ys = []
        for j, row in enumerate(rows(x)):
            carry = step(carry, row)
            if scanning:
                carry, y = carry
                ys.append(y)
            # (each step's state as the loop takes it: a 1-tuple for a tensor state is the tensor; a block's
            # step i is its index in the loop where the block knows it, else in the block)
            carry = _as_state(carry, single, n, x * unroll + j if parts is None and not scanning else j)
            carry = carry[0] if single else carry
        return (carry, _stacked(ys)) if scanning else carry

    if parts is None:
        block_xs = None
    else:
        block_xs = tuple(p[:blocks * unroll].reshape((blocks, unroll) + tuple(p.shape[1:])) for p in parts)
        block_xs = block_xs if isinstance(xs, tuple) else block_xs[0]
    if scanning:
        length = None if block_xs is not None else blocks
        carry, ys = loop(block, state, block_xs, length, **options)
        ys = _unblocked(ys)
    else:
        carry = loop(block, state, blocks, xs=block_xs, **options)
    if left:
        done = blocks * unroll
        tail, tail_xs = step, None
        if parts is not None:
            tail_xs = tuple(p[done:] for p in parts) if isinstance(xs, tuple) else xs[done:]
        elif not scanning:
            def tail(c, i):
                return step(c, done + i)
        if scanning:
            carry, more = loop(tail, carry, tail_xs, None if tail_xs is not None else left, **options)
            ys = _joined(ys, more)
        else:
            carry = loop(tail, carry, left, xs=tail_xs, **options)
    return (carry, ys) if scanning else carry


def _without_index(f):
    @functools.wraps(f)
    def step(carry, i):
        return f(carry, None)
    return step


def _stacked(ys):
    """A block's per-step outputs (each None, a tensor or a tuple of tensors) stacked along a new first axis."""
    first = ys[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return tuple(stack([y[k] for y in ys]) for k in range(len(first)))
    return stack(ys)


def _unblocked(ys):
    """A scan of blocks' stacked outputs, ``(blocks, unroll, ...)``, as one row a step."""
    if ys is None:
        return None
    if isinstance(ys, tuple):
        return tuple(_unblocked(y) for y in ys)
    return ys.reshape((ys.shape[0] * ys.shape[1],) + tuple(ys.shape[2:]))


def _joined(ys, more):
    if ys is None:
        return None
    if isinstance(ys, tuple):
        return tuple(concatenate([a, b]) for a, b in zip(ys, more))
    return concatenate([ys, more])


def _check_xs(xs, steps):
    """``xs`` (a tensor, or a tuple of tensors: step ``i`` reads row ``i`` of each) as a tuple."""
    parts = xs if isinstance(xs, tuple) else (xs,)
    for x in parts:
        if not isinstance(x, Tensor):
            raise TypeError(f"checkpoint_steps(): argument 'xs' must be Tensor or tuple of Tensors, not "
                            f"{type(x).__name__}")
        if x.ndim == 0 or x.shape[0] != steps:
            raise ValueError(f"checkpoint_steps(): xs must have one row per step (steps={steps}), but got shape "
                             f"{list(x.shape)}")
    return xs


def _as_state(out, single, n, i):
    out = (out,) if single and isinstance(out, Tensor) else out
    if not isinstance(out, tuple) or len(out) != n or not all(isinstance(t, Tensor) for t in out):
        want = "a Tensor" if single else f"a tuple of {n} Tensors"
        raise TypeError(f"checkpoint_steps: step must return a state like the one it is given ({want}), but step "
                        f"{i} returned {type(out).__name__}")
    return out


_STEP_READS = ("checkpoint_steps: step", "make it a leaf (t.detach().requires_grad_()) or compute it inside step")


class _Loop:
    """A time loop's steps recorded: the forward bodies (one for every step, or one per step where
    the step depends on ``i``), the reverse bodies, the values they read (``fixed``: each step's
    at ``fixed_at``) and the leaves requiring grad among them."""

    @classmethod
    def trace(cls, step, states, steps, xs, single, want_grad, ys=False):
        self = cls()
        self.n, self.steps, self.single = len(states), steps, single
        self.xs = () if xs is None else xs if isinstance(xs, tuple) else (xs,)
        # the values the loop reads, as they are now: a later write to a state or to xs that no op saved
        # leaves the gradient as torch's unrolled loop gives it (of the values it ran on)
        self.state_values = tuple(recorded(t) for t in states)
        self.xs_values = tuple(recorded(x) for x in self.xs)
        self.x_grad = bool(want_grad and any(x.requires_grad for x in self.xs))
        # (the draws from Python's random counted once around all the recordings, not patched in and out per step)
        with door_python_draws():
            records = self._record(step, states, steps, xs, single, want_grad, ys)
        first = records[0]
        self.n_ys, self.ys_structure = first.n_ys, first.ys_structure
        self.reaches = tuple(r.reaches for r in records)  # (one per step, or step 0's for all)
        self.leaves, self.error = first.leaves, None
        self.guarded = tuple({id(t): t for r in records for t in r.guarded}.values())
        self.last_requires_grad = _final_requires_grad(records, states, steps, self.x_grad) if want_grad else None
        known = {id(v) for v in first.leaves}
        for r in records:
            if want_grad and not any(first.requires_grad) and any(r.requires_grad):
                raise RuntimeError(f"checkpoint_steps: step 0 records no autograd graph (it ran under no_grad, or "
                                   f"returned a state that does not require grad) but step {r.i} does; step must do "
                                   "the same at every step")
            if self.error is None and any(id(v) not in known for v in r.read_leaves):
                self.error = (f"checkpoint_steps: step {r.i} reads a leaf tensor requiring grad that step 0 does not "
                              "read; step must read the same leaves at every step")
        if all(r.fwd == first.fwd and r.rev == first.rev and r.fixed_ids == first.fixed_ids for r in records):
            records = [first]  # every step does what step 0 does: one body for all
        union, at = {}, []  # the values the steps read from outside, each once
        for r in records:
            at.append(tuple(union.setdefault(i, (len(union), v))[0] for i, v in zip(r.fixed_ids, r.fixed)))
        self.fixed = tuple(v for _, v in union.values())
        self.fixed_at = tuple(at) if len(records) > 1 else None
        self.fwds, self.revs = tuple(r.fwd for r in records), tuple(r.rev for r in records)
        self.differentiable = want_grad and (any(t.requires_grad for t in states) or bool(self.leaves)
                                             or self.x_grad)
        return self

    def _record(self, step, states, steps, xs, single, want_grad, ys):
        """Each step recorded: step 0 with its reversal; without ``xs``, every other step forward only
        (step reads ``i``), with its own reversal only where it does not do what step 0 does."""
        first = _Recorded(step, states, 0, xs, single, want_grad, self.x_grad, ys=ys)
        records = [first]
        if xs is None:  # each step recorded (forward only) to see whether it does what step 0 does
            for i in range(1, steps):
                r = _Recorded(step, states, i, xs, single, want_grad, self.x_grad, first.leaves, reverse=False,
                              ys=ys, like=first)
                if (r.fwd != first.fwd or r.fixed_ids != first.fixed_ids or r.grads_by != first.grads_by
                        or (want_grad and r.grads_by is None)):
                    r = _Recorded(step, states, i, xs, single, want_grad, self.x_grad, first.leaves, ys=ys)
                else:  # step 0's forward and autograd graph: its reversal too (one recorded forward only has none)
                    r.rev = first.rev
                records.append(r)
        return records

    def srcs(self):
        """The values the scan reads: the initial state, the per-step data, the fixed values."""
        return self.state_values + self.xs_values + self.fixed

    def xs_at(self):
        return tuple(range(self.n, self.n + len(self.xs)))

    def params(self):
        return (("bodies", self.fwds), ("steps", self.steps), ("n_carry", self.n), ("xs_at", self.xs_at()),
                ("fixed_at", self.fixed_at), ("ys_blocks", (self.steps,)))

    def ys_avals(self):
        """(dtype, meta, chunks) of each stacked per-step output."""
        out = []
        for dtype, meta, chunks in self.fwds[0].out_avals[self.n:]:
            stacked = np.empty((0,) * (meta.ndim + 1), dtype=meta.dtype) if type(meta) is np.ndarray else \
                meta.reshape((0,) * (meta.ndim + 1))
            out.append((dtype, stacked, ((self.steps,),) + tuple(chunks)))
        return out

    def forward_values(self):
        avals = list(self.fwds[0].out_avals[:self.n]) + self.ys_avals()
        return door.defer_many(door.scan_forward, self.srcs(), self.params(), avals)

    def forward_tensors(self):
        return [Tensor._make(v) for v in self.forward_values()]


class _Recorded:
    """One recording of ``step`` (step ``i``, on aliases of the state and of ``x``): its forward
    body, its reverse body (``want_grad``: the VJP with respect to the state, ``leaves`` -- found
    here when not given -- and ``x``), and the values its fixed inputs read."""

    def __init__(self, step, states, i, xs, single, want_grad, x_grad, leaves=None, reverse=True, ys=False,
                 like=None):
        n, self.i = len(states), i
        start = next(graph._made)
        with door_recording() as trace:
            carry = tuple(Tensor._make(door.alias(recorded(t)), requires_grad=want_grad) for t in states)
            parts = () if xs is None else xs if isinstance(xs, tuple) else (xs,)
            x = tuple(Tensor._make(door.alias(_row(p)), requires_grad=x_grad) for p in parts)
            with enable_grad() if want_grad else no_grad(), graph.watch_saved() as saved:
                arg = i if xs is None else x if isinstance(xs, tuple) else x[0]
                out = step(carry[0] if single else carry, arg)
                self.ys_structure, extra = None, ()
                if ys:
                    if not isinstance(out, tuple) or len(out) != 2:
                        raise TypeError(f"scan: f must return (carry, y), but step {i} returned {type(out).__name__}")
                    out, y = out
                    if isinstance(y, Tensor):
                        self.ys_structure, extra = "tensor", (y,)
                    elif isinstance(y, tuple) and all(isinstance(t, Tensor) for t in y):
                        self.ys_structure, extra = "tuple", y
                    elif y is not None:
                        raise TypeError(f"scan: f's y must be a Tensor, a tuple of Tensors or None, not "
                                        f"{type(y).__name__}")
                out = _as_state(out, single, n, i)
                out = tuple(_like(o, t, i) for o, t in zip(out, states)) + tuple(extra)
            self.n_ys = len(extra)
            self.requires_grad = tuple(o.requires_grad for o in out)
            self.grads_by = _grad_structure(out, carry + x) if want_grad else None
            # (the reach is a function of the autograd graph's shape: a step recording step 0's takes its reach)
            same = like is not None and self.grads_by is not None and self.grads_by == like.grads_by
            self.reaches = like.reaches if same else _reaches(out, carry, x) if want_grad else None
            own = {id(t) for t in carry} | {id(t) for t in x}
            self.read_leaves = _leaves_read(out, own, start, *_STEP_READS, returned=True) if want_grad else []
            self.leaves = self.read_leaves if leaves is None else leaves
            want_grad = want_grad and reverse
            adj = tuple(Tensor._make(door.alias(recorded(o))) for o in out) if want_grad else ()
            if want_grad:
                wanted = list(carry) + list(self.leaves) + (list(x) if x_grad else [])
                pairs = [(o, g) for o, g in zip(out, adj) if o.requires_grad]
                grads = grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True,
                             materialize_grads=True) if pairs else tuple(zeros_like(w) for w in wanted)
        if trace.breaks:
            raise RuntimeError(f"checkpoint_steps: step {i} cannot be recorded once for every step: "
                               + "; ".join(trace.breaks))
        self.guarded = _saved_from_outside(saved, trace, states if i == 0 else (), carry, parts, x)
        # what the step read from outside (leaves, constants) it read through aliases: its fixed inputs
        fixed_aliases = [a for a, _ in trace.inputs.values()]
        self.fixed = tuple(door.through(a) for a in fixed_aliases)
        self.fixed_ids = tuple(trace.inputs)
        inputs = [recorded(t) for t in carry] + [recorded(t) for t in x] + fixed_aliases
        roles = ["carry"] * n + ["x"] * len(x) + ["fixed"] * len(fixed_aliases)
        self.fwd = door.Body([recorded(o) for o in out], inputs, roles)
        self.rev = door.Body([recorded(g) for g in grads], inputs + [recorded(a) for a in adj],
                             roles + ["carry"] * n + ["x"] * self.n_ys) if want_grad else None


def _saved_from_outside(saved, trace, states, carry, xs, x):
    """The tensors from outside the step that its ops saved for the backward, as the unrolled loop's
    ops save them in torch: what the step read from outside, the initial state (``states``: step 0's)
    and the per-step data ``xs``, where their aliases in the step were saved.  A write to one of them
    before the backward raises torch's in-place error (:func:`daskgrad.graph.guard`); the loop reads
    the values it recorded, so without it the gradient would be the old values', silently."""
    alias = {id(a): t for a, t in zip(carry, states)} | {id(a): t for a, t in zip(x, xs)}
    own, out = {id(a) for a in carry + x}, {}
    for t in saved:
        base = t._base if t._base is not None and id(t._base) in alias else t  # (a row of a block's x: x[j])
        if id(base) in alias:
            out[id(alias[id(base)])] = alias[id(base)]
        elif id(t) not in own and id(t._storage) not in trace.fresh:
            out[id(t)] = t
    return tuple(out.values())


def _final_requires_grad(records, states, steps, x_grad):
    """Which components of the final state require grad, as the unrolled loop's: step by step, a
    component does where its step recorded it (not under ``no_grad``) from a leaf, the step's data
    requiring grad, or a component that did (a step under ``no_grad`` cuts the history after it)."""
    n = len(states)
    req = tuple(t.requires_grad for t in states)
    for i in range(steps):
        r = records[i if len(records) > 1 else 0]
        new = tuple(r.requires_grad[k] and any(kind == "l" or (kind == "x" and x_grad) or (kind == "c" and req[j])
                                               for kind, j in r.reaches[k]) for k in range(n))
        if new == req and len(records) == 1:  # (every later step does the same again)
            break
        req = new
    return req


def _reaches(outs, carry, x):
    """For each of a step's outputs, the inputs its gradient reaches: ``("c", j)`` the state's component
    ``j``, ``("x", j)`` the step's data, ``("l", id)`` a leaf it reads (its autograd graph, walked back)."""
    at = {id(t): ("c", j) for j, t in enumerate(carry)}
    at.update({id(t): ("x", j) for j, t in enumerate(x)})
    sets = {}
    roots = [o.grad_fn if o.grad_fn is not None else graph.edge(o) for o in outs]
    stack = [(n, False) for n in roots if n is not None]
    while stack:
        node, expanded = stack.pop()
        if id(node) in sets:
            continue
        edges = [e[0] for e in node.next_functions if e[0] is not None]
        if not expanded:
            stack.append((node, True))
            stack.extend((e, False) for e in edges if id(e) not in sets)
            continue
        variable = getattr(node, "variable", None)
        own = set() if variable is None else {at.get(id(variable), ("l", id(variable)))}
        for e in edges:
            own |= sets[id(e)]
        sets[id(node)] = frozenset(own)
    return tuple(frozenset() if n is None else sets[id(n)] for n in roots)


def _reached(loop, adjoint):
    """Which of the loop's inputs a gradient reaches from the outputs that got one (``adjoint``: None
    where an output got none): the initial state's components, the leaves (by id) and the parts of ``xs``,
    following each step's :func:`_reaches` back from the last step.  The others keep ``.grad`` None, as
    an unrolled loop leaves them in torch (a component every step remakes from leaves, ``w * 1.0``)."""
    n = loop.n
    wanted = {j for j in range(n) if adjoint[j] is not None}
    ys = [n + k for k in range(loop.n_ys) if adjoint[n + k] is not None]
    leaves, xs = set(), set()
    for i in reversed(range(loop.steps)):
        reaches = loop.reaches[i if len(loop.reaches) > 1 else 0]
        before = set()
        for k in wanted.union(ys):
            for kind, j in reaches[k]:
                if kind == "c":
                    before.add(j)
                elif kind == "l":
                    leaves.add(j)
                else:
                    xs.add(j)
        if len(loop.reaches) == 1 and before == wanted:  # (every earlier step reaches the same again)
            break
        wanted = before
    return wanted, leaves, xs


def _grad_structure(outs, inputs):
    """The autograd graph a step recorded, back from ``outs``, by shape: each node's name, where its
    edges go and whether it has hooks; a leaf by its place among the step's ``inputs`` (or by
    identity: a leaf every step reads); None where one has hooks (its reversal is its own).  Two
    steps recording one forward program differ here where ``detach()``, ``no_grad()`` or a hook
    changes their backward only."""
    at = {id(t): j for j, t in enumerate(inputs)}
    index, desc = {}, []
    roots = [o.grad_fn if o.grad_fn is not None else graph.edge(o) for o in outs]
    stack = [(n, False) for n in reversed(roots) if n is not None]
    while stack:
        node, expanded = stack.pop()
        if id(node) in index:
            continue
        edges = [e[0] for e in node.next_functions]
        if not expanded:
            stack.append((node, True))
            stack.extend((e, False) for e in reversed(edges) if e is not None and id(e) not in index)
            continue
        if getattr(node, "_hooks", None) or getattr(node, "_prehooks", None) or getattr(node, "_tensor_hooks", None) \
                or getattr(node, "_retained", None):
            return None
        variable = getattr(node, "variable", None)
        leaf = None if variable is None else at.get(id(variable), ("id", id(variable)))
        index[id(node)] = len(desc)
        desc.append((node.name(), leaf, tuple(None if e is None else index[id(e)] for e in edges)))
    return tuple(desc), tuple(None if n is None else index[id(n)] for n in roots)


def _like(out, state, i):
    """A step's output on its state's chunks (the next step reads it in their place)."""
    if out.shape != state.shape or out.dtype != state.dtype:
        raise TypeError(f"checkpoint_steps: step must return a state like the one it is given, but step {i} returned "
                        f"a tensor of shape {list(out.shape)} and dtype {out.dtype} for one of shape "
                        f"{list(state.shape)} and dtype {state.dtype}")
    return out if out.chunks == state.chunks else rechunk(out, state.chunks)


def _row(xs):
    """A placeholder slot of one row of ``xs`` (its chunks without the first axis)."""
    v = recorded(xs)
    return door.row_placeholder(v)


class _Schedule:
    """What ``_Scan`` runs: the recorded loop and Revolve's schedule of it (its actions)."""

    def __init__(self, loop, actions):
        self.loop, self.actions = loop, tuple(actions)
        self.n = loop.n
        self.grads = {}


class _Scan(Function):
    """The time loop as one node.  Its output is a token, a 0-d zero no user sees: each output (the final
    state's components, the stacked per-step outputs) comes through a ``_Component`` of it, whose
    backward hands the gradient over in the schedule, so only the outputs the loss reads send one (a node
    with several outputs would pack them into one flat array, copying a whole state).  Inputs: the schedule,
    the initial state, the leaves step reads, ``xs`` if it requires grad."""

    @staticmethod
    def forward(ctx, schedule, *inputs):
        ctx.schedule = schedule
        schedule.last = schedule.loop.forward_tensors()
        schedule.grads = {}
        return _tensor.zeros((), dtype=schedule.last[0].dtype, device=schedule.last[0].device)

    @staticmethod
    def backward(ctx, _token):
        if is_grad_enabled():
            raise RuntimeError("checkpoint_steps: a double backward (create_graph=True) through it is not supported")
        schedule, loop = ctx.schedule, ctx.schedule.loop
        if loop.error is not None:
            raise RuntimeError(loop.error)
        adjoint = [schedule.grads.pop(k, None) for k in range(schedule.n + loop.n_ys)]
        if all(g is None for g in adjoint):
            return (None,) * len(ctx.needs_input_grad)
        last = schedule.last
        adj = [recorded(g) if g is not None else recorded(zeros_like(t)) for g, t in zip(adjoint, last)]
        rev = loop.revs
        avals = rev[0].out_avals[:schedule.n + len(loop.leaves)]
        if loop.x_grad:
            avals = avals + tuple((v.dtype, v._meta, v.chunks) for v in loop.xs_values)
        params = (("fwd", loop.fwds), ("rev", rev), ("actions", schedule.actions), ("steps", loop.steps),
                  ("n_carry", schedule.n), ("n_leaves", len(loop.leaves)),
                  ("xs_at", loop.xs_at()), ("x_grad", loop.x_grad),
                  ("fixed_at", loop.fixed_at), ("n_ys", loop.n_ys))
        outs = [Tensor._make(v) for v in door.defer_many(door.scan_revolve, loop.srcs() + tuple(adj), params, avals)]
        states, leaves, xs = _reached(loop, adjoint)
        reached = ([j in states for j in range(schedule.n)] + [id(v) in leaves for v in loop.leaves]
                   + [j in xs for j in range(len(loop.xs))] * loop.x_grad)
        needs = ctx.needs_input_grad
        return (None, *(g if needs[1 + k] and reached[k] else None for k, g in enumerate(outs)))


class _Component(Function):
    """Output ``k`` of the loop out of ``_Scan``'s token: its backward hands the gradient to ``_Scan``'s
    through the schedule, and a zero to the token, so that ``_Scan``'s backward runs after it."""

    @staticmethod
    def forward(ctx, schedule, k, token):
        ctx.schedule, ctx.k, ctx.zero = schedule, k, zeros_like(token)  # zeros read no values: no dependency
        return schedule.last[k].detach()

    @staticmethod
    def backward(ctx, g):
        ctx.schedule.grads[ctx.k] = g
        return None, None, ctx.zero
