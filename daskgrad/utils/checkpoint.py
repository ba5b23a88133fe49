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
import warnings

import dask.array as da
from dask.base import tokenize

from .. import _tensor, graph
from .._modes import enable_grad, is_grad_enabled
from .._tensor import Tensor
from ..engine import grad
from ..function import Function

__all__ = ["checkpoint", "checkpoint_sequential"]

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
        outs, leaves = _first_run(run, args)
    if use_reentrant and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        leaves = []  # torch's reentrant variant: no input requires grad, no gradient (parameters' neither)
    region = _Region(run, rng, recompute_context, outs, len(args))
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
    with enable_grad():
        outs = run(*stand_ins)
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
                f"checkpoint: the function reads a tensor made outside it that requires grad (its grad_fn is "
                f"{node.name()}); pass that tensor as an argument of checkpoint")
        else:
            stack.extend(child for child, _ in node.next_functions if child is not None)

    def detach(o):
        return o.detach() if isinstance(o, Tensor) else o

    return (tuple(map(detach, outs)) if isinstance(outs, tuple) else detach(outs)), list(leaves.values())


class _Region:
    """What the backward needs to run the region again: the function, the random state it started
    with, the context to run it in; and the first run's outputs, for the forward to hand on."""

    def __init__(self, run, rng, context, outs, n_args):
        self.run, self.rng, self.context, self.outs, self.n_args = run, rng, context, outs, n_args

    def again(self, *args):
        if self.rng is None:
            with self.context:
                return self.run(*args)
        now = _tensor._rng.bit_generator.state
        _tensor._rng.bit_generator.state = self.rng
        try:
            with self.context:
                return self.run(*args)
        finally:
            _tensor._rng.bit_generator.state = now


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
    a, g = t.detach().array, gate.array
    first = g.blocks[(0,) * g.ndim] if g.ndim else g
    tiny = first.ravel()[:1].sum()  # one element of one chunk of the gradient: a cheap dependency
    index = tuple(range(a.ndim))
    arr = da.blockwise(_pass, index, a, index, tiny, (), dtype=a.dtype, meta=a._meta,
                       name="recompute-" + tokenize(a, g))
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
