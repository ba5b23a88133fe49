"""The error for values daskgrad kept on a cluster that the cluster no longer has.

Each kept value lives on two workers (:mod:`daskgrad._dask.replicas`); it is gone only when both die
before a copy is made, or the scheduler restarts (a new scheduler knows none of the old keys).
Dask would then report ``FutureCancelledError: lost dependencies`` about internal keys; this
names what the user lost instead, found by looking, at that moment, for the modules and
optimizers that hold the lost storages (no bookkeeping on the training path).
"""
from __future__ import annotations

import gc

RECIPE = ("They cannot be recomputed: resume from a checkpoint (daskgrad.save / daskgrad.load, "
          "see 'Checkpoint and resume' in the README).")


class LostTensorError(RuntimeError):
    """Tensors whose values were held on a cluster that lost them (``.names`` lists them)."""

    def __init__(self, names):
        self.names = list(names)
        shown = ", ".join(self.names[:20]) + (f", ... ({len(self.names)} in all)" if len(self.names) > 20 else "")
        super().__init__(f"{len(self.names)} tensor value(s) daskgrad kept on the cluster were lost (the scheduler "
                         "restarted, every worker holding a copy died or was restarted at its memory limit, or the "
                         f"client holding them was closed): {shown}. {RECIPE}")


def describe(lost, shapes) -> list[str]:
    """Names for the lost dask array names ``lost``: a module's parameter, a ``.grad``, an
    optimizer's state entry, or else the shape and dtype (``shapes``: name -> array) or the name."""
    # the modules and optimizers holding them sit floors above: found by what they have, not by type
    objects = gc.get_objects()
    params, by_id = {}, {}  # id(parameter) -> its name in the outermost module holding it
    for obj in objects:
        if _is_module(obj):
            for name, p in obj.named_parameters():
                by_id[id(p)] = p
                if len(name) > len(params.get(id(p), "")):
                    params[id(p)] = name
    names = {}
    for pid, p in by_id.items():
        names[p.array.name] = f"parameter {params[pid]!r}"
        if p._grad is not None:
            names[p._grad.array.name] = f"{params[pid]}.grad"
    for obj in objects:
        if _is_optimizer(obj):
            for pid, state in obj.state.items():
                for key, v in state.items():
                    if hasattr(v, "_storage") and hasattr(v, "array"):
                        owner = repr(params[pid]) if pid in params else "a parameter"
                        names[v.array.name] = f"{type(obj).__name__} state {key!r} of {owner}"
    named = sorted(names[n] for n in lost if n in names)
    others = [f"a tensor of shape {shapes[n].shape}, {shapes[n].dtype}" if n in shapes else f"cluster data {n!r}"
              for n in sorted(lost) if n not in names]
    if named and others:  # the values the named ones were computed from: noise to the user
        return named + [f"{len(others)} value(s) they were computed from"]
    return named + others


def _is_module(obj) -> bool:
    return any(c.__name__ == "Module" and c.__module__ == "daskgrad.nn.module" for c in type(obj).__mro__)


def _is_optimizer(obj) -> bool:
    return any(c.__name__ == "Optimizer" and c.__module__ == "daskgrad.optim.optimizer" for c in type(obj).__mro__)
