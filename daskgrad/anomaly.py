"""Anomaly detection's checks: name the forward line behind a NaN produced in backward.

The mode itself (``detect_anomaly``, ``set_detect_anomaly``) lives in ``_modes``.  Forward stacks
are captured while recording (cheap, client side).  The NaN checks are one tiny
``isnan(g).any()`` reduction per VJP output, submitted with the gradients, and inspected before
any ``.grad`` is written.
"""
from __future__ import annotations

import warnings

import dask.array as da

from . import _dask as door
from ._modes import is_anomaly_check_nan_enabled
from ._tensor import recorded


def nan_flags(checks):
    """One flag per VJP output; none when anomaly mode runs with ``check_nan=False``."""
    if not is_anomaly_check_nan_enabled():
        return []
    return [door.defer(_any_nan, (recorded(o),)) for _, _, o in checks]


def _any_nan(a):
    return da.isnan(a).any()


def raise_for_nan(checks, flags):
    for (node, index, _), flag in zip(checks, flags):
        if bool(door.gather(flag)):  # (computed by the backward's submission: read where it is)
            stack = "".join(node._stack or [])
            warnings.warn(f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
                          f"{stack}", UserWarning, stacklevel=4)
            line = (node._stack or [""])[-1].rstrip()
            raise RuntimeError(f"Function '{node.name()}' returned nan values in its {index}th output."
                               + (f"\n\nForward call that created it:\n{line}" if line else ""))
