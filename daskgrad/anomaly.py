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
        self._prev = (graph.is_anomaly_enabled(), _check_nan())
        graph._anomaly.enabled, graph._anomaly.check_nan = True, self.check_nan
        return self

    def __exit__(self, *exc):
        graph._anomaly.enabled, graph._anomaly.check_nan = self._prev
        return False

    def __call__(self, fn):
        check_nan = self.check_nan

        def factory():
            with warnings.catch_warnings():  # the warning was given once, at decoration
                warnings.simplefilter("ignore")
                return detect_anomaly(check_nan)

        return graph.decorate(factory, fn)


class set_detect_anomaly:
    """Sets anomaly mode as a plain call; as a context manager it restores the previous mode."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self._prev = (graph.is_anomaly_enabled(), _check_nan())
        graph._anomaly.enabled, graph._anomaly.check_nan = bool(mode), bool(check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        graph._anomaly.enabled, graph._anomaly.check_nan = self._prev
        return False


def _check_nan() -> bool:
    return getattr(graph._anomaly, "check_nan", True)


def is_anomaly_check_nan_enabled() -> bool:
    return _check_nan()


def nan_flags(checks):
    """One flag per VJP output; none when anomaly mode runs with ``check_nan=False``."""
    if not _check_nan():
        return []
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
