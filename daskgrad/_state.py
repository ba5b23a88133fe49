"""Process-wide state of daskgrad, and why each piece exists.

Here, the registries of tensor storages every floor above reads (they hold storages weakly, and
know nothing of tensors or Dask):

* ``_pending``: storages holding a lazy value that an in-place write made (``w -= lr * w.grad``);
  the next submission computes them, so a parameter updated once per step never grows a lineage.
* ``_holders``/``_held``/``_listed``/``_unkeep``: which storages hold each value kept on two workers,
  so that a value no tensor holds any more goes back to one copy (:mod:`daskgrad._dask.replicas`).
* ``_sources``: the storages made over each lazy dask graph (a dataset made or read lazily), which
  a submission that reads it again may compute and swap in (``runtime``'s held sources);
* ``_lock``: guards the first two (``_sources`` has its own); re-entrant because :func:`hold` runs
  inside a submission's swap.

Elsewhere, each beside the code that needs it:

* ``_modes._state``: grad, inference and anomaly modes, per thread, as torch's;
* ``graph.PRIMITIVES``: the op table; ``runtime._retained``: nodes whose saved values are pinned
  (their layers are reused by later submissions); ``runtime._stored_names``: stored names, to name
  what a lost worker took; ``runtime._observers``/``_progress``: submission observers, progress bar;
  ``runtime._graphs_read``/``_held_sources``: lazy graphs recent submissions read, lazily made values held;
* ``engine._claimed``/``_grad_locks``: nodes a running backward will free, and per-leaf locks, so
  threads backpropagating at once behave as torch's;
* ``_tensor._rng``: ``manual_seed``'s generator; ``_tensor._cuda_ok``: a GPU was found once;
  ``ops.indexing._chunk_metas``: an empty meta array per chunk type, dtype and ndim seen (getitem's VJP);
* ``_dask.submit._tokens``/``_installed``/``_rooms``: per-client stored-name tokens, schedulers that
  have the Keeper, the room for a task's output on the tightest worker (asked every few seconds);
  ``_dask.deterministic._blas``/``_installed``/``_registered``: the BLAS thread limiter, whether this
  process aligns what it receives, clusters whose workers do; ``_modes._deterministic``: the mode;
  ``_dask.calls._inner_observer``: a memory tracker;
  ``_dask.dashboard._outbox``/``_node_ids``: retained graphs not yet published to the scheduler.
"""
from __future__ import annotations

import collections
import threading
import weakref

from ._dask import Lazy, held_keys, is_data
from ._modes import current_trace

# ------------------------------------------------------------ pending storages
# storages holding a lazy value that an in-place write made, in the order written (a dict: a program's
# outputs come in that order, so a loop's steps are one program)
_pending = weakref.WeakKeyDictionary()
_lock = threading.RLock()  # (hold() runs inside the swap)


def mark_pending(storage) -> None:
    """``storage`` (a leaf's, after an in-place write) holds a lazy value built on its old one;
    the next submission computes it.  Held weakly: a value nobody can reach is never computed."""
    trace = current_trace()
    if trace is not None:
        trace.wrote(storage)
    with _lock:
        _pending[storage] = None


def take_pending(runs_here):
    """The pending storages whose value ``runs_here(value)``, no longer pending (the caller computes them)."""
    with _lock:
        mine = [st for st in list(_pending) if runs_here(st.value)]
        for st in mine:
            del _pending[st]
    return mine


def forget_pending(ids) -> None:
    """The storages of ``ids`` (a compiled function's own tensors, whose values its results hold)
    are no longer pending."""
    with _lock:
        for st in [st for st in list(_pending) if id(st) in ids]:
            del _pending[st]


def swap(storage, old, new, pending=True) -> bool:
    """``storage`` holds ``new``, the computed ``old``, unless another thread wrote it meanwhile
    (then what it holds is pending again, if ``pending``); whether it does."""
    with _lock:
        if storage.value is old:
            storage.value = new
            if type(old) is Lazy:  # programs that read the value recorded read it from memory
                old.becomes(new)
            hold(storage)
            return True
        if pending:
            _pending[storage] = None
        return False


def pending_values(in_memory):
    """The values in-place writes left, which the next submission computes (those not ``in_memory``
    already)."""
    with _lock:
        return [st.value for st in list(_pending) if not in_memory(st.value)]


# ------------------------------------------------------------ who holds a kept value
# A kept value (a stored parameter, a .grad) goes on being referenced by lazy graphs after its
# tensor has let go of it: the loop's `residual = A(u) - f`, built on a pending update, pins the
# previous u and u.grad until it is dropped.  Those need no second copy: once no storage holds a
# value, the Keeper is told (with the next submission's call, so pending updates that read it have
# run) and distributed's memory manager drops the extra copy.  Saved values of retained graphs are
# not registered here: they keep both copies until released.
_holders = {}  # kept array name -> [WeakSet of storages holding it, its keys]
# key -> how many kept names list it: whole chunks of a value (a minibatch) are that value's keys, which
# go back to one copy only once no name lists them (a minibatch let go must not drop its dataset's copy)
_listed = collections.Counter()
_held = weakref.WeakKeyDictionary()  # storage -> ([the kept name it holds], a weakref telling of its death)
_unkeep = []  # keys of values no storage holds any more, for the Keeper's next call
# names that may have lost their last holder: a storage holding them died or moved on.  let_go
# looks at these only, not at every kept value (nested backwards keep one per level: a scan of
# all of them at each submission made 2,000 levels quadratic).  Appended to without the lock: a
# storage dies whenever the garbage collector runs, in any thread, maybe inside this module.
_maybe_gone = []


def hold(storage, keys=None):
    """``storage`` holds its (kept) array; ``keys`` registers the array as kept (else it is
    registered only if it already is)."""
    name = storage.array.name
    with _lock:
        entry = _holders.get(name)
        if entry is None:
            if keys is None and not name.startswith("stored-"):
                return
            entry = _holders[name] = [weakref.WeakSet(), keys or held_keys(storage.array)]
            _listed.update(entry[1])
        held = _held.get(storage)
        if held is None:  # (the weakref lives as long as the storage: its callback runs when it dies)
            cell = [name]
            _held[storage] = (cell, weakref.ref(storage, lambda _, cell=cell: _maybe_gone.append(cell[0])))
        else:
            cell = held[0]
            if cell[0] != name and cell[0] in _holders:
                _holders[cell[0]][0].discard(storage)
                _maybe_gone.append(cell[0])
            cell[0] = name
        entry[0].add(storage)


def share(storage):
    """A new storage over an array that may be kept (a snapshot, a detached view) holds it too; one
    over a lazy dask graph (a dataset generated or read chunk by chunk) is noted as a source."""
    name = storage.array.name
    if name in _holders:
        hold(storage)
    elif not is_data(storage.array):
        with _sources_lock:
            if len(_sources) > 1024:  # (names whose storages all died)
                for n in [n for n, held in _sources.items() if not held]:
                    del _sources[n]
            _sources.setdefault(name, weakref.WeakSet()).add(storage)


def sources(array):
    """The storages that hold ``array``, a lazy dask graph, as their value (see runtime's held sources)."""
    with _sources_lock:
        return [st for st in _sources.get(array.name, ()) if st.value is array]


_sources = {}  # a lazy dask graph's name -> WeakSet of the storages made over it
_sources_lock = threading.Lock()  # (not _lock: a submission reads it while it makes its program, and a swap
# holding _lock waits for that to end, Lazy.becomes)


def let_go():
    """Queue the keys of kept values no storage holds any more; they are sent with the next call
    to the Keeper, which comes after a submission has run."""
    with _lock:
        names = _maybe_gone[:]
        del _maybe_gone[:len(names)]
        for n in dict.fromkeys(names):
            entry = _holders.get(n)
            if entry is not None and not entry[0]:
                for k in _holders.pop(n)[1]:
                    _listed[k] -= 1
                    if not _listed[k]:
                        del _listed[k]
                        _unkeep.append(k)


def take_unkeep(send=True):
    """The queued keys of values no storage holds any more, emptying the queue (``send=False``:
    there is no Keeper to tell; they are dropped)."""
    with _lock:
        keys, _unkeep[:] = list(_unkeep), []
    return keys if send else []
