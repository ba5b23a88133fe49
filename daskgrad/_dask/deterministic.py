"""The same bits wherever a task runs: what ``daskgrad.use_deterministic_algorithms(True)`` changes.

A graph fixes the order of every sum across chunks (a reduction tree, a contraction's partial
products added in order), so two runs of one graph differ only where a chunk kernel gives other
bits for the same inputs.  Measured on 3 worker processes (16-chunk ``X.T @ (X @ w)``: 8 distinct
bit patterns in 8 runs, plain dask's too), two causes:

* **Alignment.**  A chunk that comes over the network lies wherever its frame fell in the
  message: at any byte offset (a worker logged its ``X_k.T`` operands at addresses ``% 8`` of 0
  to 6).  NumPy hands ``a @ b`` to BLAS only when both operands are aligned to their item size;
  otherwise it runs its own loop, which adds in another order (``X_k.T @ v_k``: one bit pattern
  aligned, another misaligned, whichever worker).  ``np.sum`` of a misaligned chunk goes through
  NumPy's buffered loop: other pairwise groups, other bits.  Offsets that are multiples of 8
  give the same bits, in NumPy's loops and OpenBLAS's kernels alike.
* **BLAS threads.**  BLAS splits a product among its threads (``X.T @ X`` on one thread and on two
  differ).  Worker processes a nanny starts use one BLAS thread; in-process workers and dask's
  local scheduler use the process's thread pool.

So, in that mode: every buffer a worker process (and this one) receives is copied into 64-byte
aligned memory where it is not (distributed's deserializers wrapped, by a worker plugin); and BLAS
runs on one thread in every process that runs tasks, the local scheduler's included.  Chunk
kernels and graphs are unchanged.
"""
from __future__ import annotations

import threading

import numpy as np

from .internals import WorkerPlugin

NAME = "daskgrad-deterministic"
_ALIGN = 64
_lock = threading.Lock()
_installed = {"count": 0, "undo": None}
_registered = set()  # (client id, scheduler id) whose workers have the plugin


_blas = {}  # the threadpoolctl controller, made once (it inspects the loaded libraries)


def blas_controller():
    """threadpoolctl's controller of the BLAS libraries loaded, or None without threadpoolctl
    (an optional dependency)."""
    if "controller" not in _blas:
        try:
            from threadpoolctl import ThreadpoolController

            _blas["controller"] = ThreadpoolController()
        except ImportError:
            _blas["controller"] = None
    return _blas["controller"]


def controller():
    """:func:`blas_controller`, which deterministic mode needs."""
    found = blas_controller()
    if found is None:
        raise ImportError("daskgrad.use_deterministic_algorithms(True) sets BLAS to one thread in each process "
                          "that runs tasks, which needs threadpoolctl: pip install 'daskgrad[deterministic]'")
    return found


def aligned(buffer):
    """``buffer`` (bytes-like) at a 64-byte aligned address: itself, or a copy."""
    if isinstance(buffer, np.ndarray) or not isinstance(buffer, (bytes, bytearray, memoryview)):
        return buffer
    view = memoryview(buffer)
    if view.nbytes == 0 or not view.c_contiguous:
        return buffer
    flat = np.frombuffer(view.cast("B") if view.format != "B" or view.ndim != 1 else view, dtype=np.uint8)
    if flat.ctypes.data % _ALIGN == 0:
        return buffer
    raw = np.empty(flat.nbytes + _ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGN
    copy = raw[start:start + flat.nbytes]
    copy[...] = flat
    out = memoryview(copy)
    return out.toreadonly() if view.readonly else out


def install(blas=True):
    """Align every buffer this process deserializes (and, ``blas``: one BLAS thread); counted, so
    that several in-process workers install once and the last to go undoes it."""
    from distributed.protocol import pickle as dpickle
    from distributed.protocol.serialize import dask_deserialize

    with _lock:
        _installed["count"] += 1
        if _installed["count"] > 1:
            return
        loads, numpy_loads = dpickle.loads, dask_deserialize.dispatch(np.ndarray)

        def aligned_loads(x, *, buffers=()):
            return loads(x, buffers=[aligned(b) for b in buffers])

        def aligned_numpy_loads(header, frames):
            return numpy_loads(header, [aligned(f) for f in frames])

        dpickle.loads = aligned_loads
        dask_deserialize.register(np.ndarray, aligned_numpy_loads)
        limits = controller().limit(limits=1, user_api="blas") if blas else None

        def undo():
            dpickle.loads = loads
            dask_deserialize.register(np.ndarray, numpy_loads)
            if limits is not None:
                limits.restore_original_limits()
        _installed["undo"] = undo


def uninstall():
    with _lock:
        _installed["count"] -= 1
        if _installed["count"] == 0 and _installed["undo"] is not None:
            _installed["undo"]()
            _installed["undo"] = None


class Deterministic(WorkerPlugin):
    """The worker plugin installing this on every worker, those that join later included."""

    name = NAME

    def setup(self, worker):
        install()

    def teardown(self, worker):
        uninstall()


def on_cluster(client, enabled):
    """The workers of ``client`` in the mode or out of it (registering or removing the plugin)."""
    key = (client.id, getattr(client, "_scheduler_identity", {}).get("id"))
    if enabled and key not in _registered:
        controller()  # (the error before anything is registered)
        client.register_plugin(Deterministic(), name=NAME)
        _registered.add(key)
    elif not enabled and key in _registered:
        client.unregister_worker_plugin(NAME)
        _registered.discard(key)
