"""Anomaly detection: name the forward line behind a NaN produced in backward.

Forward stacks are captured while recording (cheap, client side).  The NaN
checks are one tiny ``isnan(g).any()`` reduction per VJP output, submitted with
the gradients, and inspected before any ``.grad`` is written.
"""
from __future__ import annotations

import warnings

import dask.array as da

from . import graph

_ENTER_WARNING = ("Anomaly Detection has been enabled. This mode will increase the runtime and should only be "
                  "enabled for debugging.")


class detect_anomaly:
    """Context manager (and decorator) enabling anomaly detection for this thread."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan
        warnings.warn(_ENTER_WARNING, UserWarning, stacklevel=2)

    def __enter__(self):
        self._prev = graph.is_anomaly_enabled()
        graph._anomaly.enabled = True
        return self

    def __exit__(self, *exc):
        graph._anomaly.enabled = self._prev
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper


def set_detect_anomaly(mode: bool, check_nan: bool = True) -> None:
    graph._anomaly.enabled = bool(mode)


def nan_flags(checks):
    return [da.isnan(o.array).any() for _, _, o in checks]


def raise_for_nan(checks, flags):
    for (node, index, _), flag in zip(checks, flags):
        if bool(flag.compute()):
            stack = "".join(node._stack or [])
            warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
                          f"{stack}", UserWarning, stacklevel=4)
            line = (node._stack or [""])[-1].rstrip()
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {index}th output."
                               + (f"\n\nForward call that created it:\n{line}" if line else ""))
