"""Where graphs run: one submission, on the current distributed Client if any.

Everything daskgrad computes goes through :func:`persist`, so the choice of
scheduler, the dashboard span and the progress bar live in one place.
"""
from __future__ import annotations

import contextlib
import weakref

import dask

from . import graph
from . import dashboard

# Low-level task fusion drops layer annotations (GPU placement) and renames keys, and a key
# submitted once fused and once not makes the scheduler warn about changed run_specs; Blockwise
# fusion, which does the real work, stays on.  Users can still override this in their dask config.
dask.config.update_defaults({"optimization": {"fuse": {"active": False}}})


def current_client():
    """The distributed Client this thread would use, or ``None`` (then dask's local scheduler runs)."""
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - distributed is a core dependency
        return None
    try:
        return get_client()
    except ValueError:
        return None


_progress = {"enabled": False}


def set_progress(enabled: bool = True) -> None:
    """Show a progress bar for each backward submission (distributed's bar, or dask's locally)."""
    _progress["enabled"] = bool(enabled)


def persist(arrays, *, phase: str = "compute"):
    """Persist ``arrays`` in one submission and return them once they are in memory."""
    arrays = list(arrays)
    if not arrays:
        return []
    client = current_client()
    if client is None:
        with _local_progress():
            return list(dask.persist(*arrays))
    from distributed import span, wait

    # off even if the user turned low-level fusion back on: it drops our GPU placement annotations
    with dask.config.set({"optimization.fuse.active": False}), span("daskgrad", phase):
        out = client.persist(arrays)
    if _progress["enabled"]:
        from distributed import progress

        progress(out)
    wait(out)
    return list(out)


@contextlib.contextmanager
def _local_progress():
    if _progress["enabled"]:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            yield
    else:
        yield


def force(t, **kwargs):
    """Compute tensor ``t`` for the user (``item()``, ``float()``, a ``while`` test, ...).

    The values that the not-yet-run backward of ``t``'s graph has saved are
    persisted in the same submission, so that backward does not compute them a
    second time; they are released with the graph.
    """
    nodes = graph.toposort([r.grad_fn for r in (t,) + t._origin if r.grad_fn is not None])
    pending = [v for n in nodes for v in (n._saved or {}).values()
               if isinstance(v, graph.SavedTensor) and v.leaf is None and not v.persisted]
    if not pending:
        return _compute(t.array, **kwargs)
    out = persist([t.array] + [s.data for s in pending], phase="forward")
    for s, arr in zip(pending, out[1:]):
        s.data, s.persisted = arr, True
    for node in nodes:
        if node._saved:
            retain(node)
    return _compute(out[0], **kwargs)


def _compute(arr, **kwargs):
    client = current_client()
    if client is None or kwargs.get("scheduler") is not None:
        return arr.compute(**kwargs)
    with dask.config.set({"optimization.fuse.active": False}):
        return client.compute(arr, **kwargs).result()



# ------------------------------------------------------------ retained graphs
_retained = weakref.WeakSet()  # nodes whose saved values are pinned in (cluster) memory


def retain(node) -> None:
    _retained.add(node)
    dashboard.publish_retained(node)  # the scheduler cannot tell which keys are retained graphs


def release_graph(t) -> int:
    """Release the saved values of every node behind tensor ``t`` (a graph kept with
    ``retain_graph=True`` or forced by ``item()``); returns how many nodes let go.

    A later backward through a released node raises torch's "second time" error."""
    count = 0
    for node in graph.toposort([t.grad_fn] if t.grad_fn is not None else []):
        if node._saved:
            node.release()
            _retained.discard(node)
            dashboard.publish_retained(node, released=True)
            count += 1
    return count


def memory_report():
    """The retained graphs: for each node holding pinned values, its keys and bytes per worker."""
    client = current_client()
    rows = []
    for node in list(_retained):
        if node._saved is None:
            continue
        keys = [k for v in node._saved.values() if isinstance(v, graph.SavedTensor) and v.persisted
                for k in _flat_keys(v.data)]
        row = {"node": node.name(), "keys": keys, "bytes": {}}
        if client is not None and keys:
            sizes = client.nbytes(keys, summary=False)
            where = client.who_has()  # (a list of keys is not accepted here, only futures)
            for key in keys:
                for w in where.get(key, ()):
                    row["bytes"][w] = row["bytes"].get(w, 0) + sizes.get(key, 0)
        rows.append(row)
    return rows


def _flat_keys(arr):
    from dask.core import flatten

    return list(flatten(arr.__dask_keys__()))
