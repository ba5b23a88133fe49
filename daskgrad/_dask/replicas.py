"""Two copies of every value daskgrad keeps on a cluster, so losing one worker loses nothing.

Parameters, optimizer state, ``.grad``, a backward's loss value and the saved values of retained
graphs are held on the workers between submissions.  The stored ones have no lineage (it would
grow by a step every step), so Dask cannot recompute them: a single copy dies with its worker.
:class:`Keeper`, a scheduler plugin, keeps each such key on two workers:

* ``keep`` (one RPC per submission, from :func:`daskgrad.runtime.persist`) files the keys the
  client stored and copies each to a second worker before the client lets go of the previous
  values, so at every moment each value has two holders;
* after a worker leaves (or joins, when only one was left) the surviving copies are copied again,
  and a kept value the scheduler computes again (its only holder died) is copied once computed;
* distributed's Active Memory Manager, which drops every replica nobody is waiting for, spares
  the kept keys.

This module imports nothing from daskgrad: it is pickled by value into the scheduler, so a
scheduler started without daskgrad installed protects the values all the same.
"""
from __future__ import annotations

import asyncio
import logging

from .internals import ReduceReplicas, SchedulerPlugin, Status

logger = logging.getLogger("distributed.scheduler")  # (its messages among the scheduler's)


COPIES = 2
NAME = "daskgrad-keeper"


class SparingReduceReplicas(ReduceReplicas):
    """distributed's ReduceReplicas, except for the keys daskgrad keeps twice."""

    def __init__(self, kept):
        super().__init__()
        self.kept = kept

    def run(self):
        for suggestion in super().run():
            if suggestion.ts.key not in self.kept:
                yield suggestion


class Keeper(SchedulerPlugin):
    name = NAME

    def __init__(self):
        self.kept = set()
        self._repairs = set()
        self._recomputed = set()  # kept keys computed again since the last copy

    async def start(self, scheduler):
        self.scheduler = scheduler
        # one set of kept keys per scheduler, whichever client registered the Keeper last (a
        # second Keeper with a set of its own would leave the first one's policy dropping copies)
        if not hasattr(scheduler, "_daskgrad_kept"):
            scheduler._daskgrad_kept = set()
        self.kept = scheduler._daskgrad_kept
        scheduler.handlers["daskgrad_keep"] = self.keep
        amm = scheduler.extensions.get("amm")
        for policy in list(getattr(amm, "policies", ())):
            if type(policy).__name__ in ("ReduceReplicas", "SparingReduceReplicas"):  # (by value: new classes)
                amm.policies.discard(policy)
                amm.add_policy(SparingReduceReplicas(self.kept))

    async def keep(self, keys, who_has=None, nbytes=None, client=None, copies=COPIES, unkeep=()):
        """File ``who_has`` (keys the client re-filed on workers, as ``update_data``) and hold every
        key of ``keys`` on ``copies`` workers (2; 1 turns the protection off).  Returns how many
        workers hold each key, in order (a list: tuple keys do not survive msgpack as dict keys).
        ``unkeep``: keys the client no longer holds (only lazy graphs do): one copy is enough."""
        s = self.scheduler
        self.kept.difference_update(k if isinstance(k, str) else tuple(k) for k in unkeep)
        if who_has:
            running = {ws.address for ws in s.running}  # a filing worker may have died since
            who_has = {k: [w for w in ws if w in running] for k, ws in who_has.items()}
            who_has = {k: ws for k, ws in who_has.items() if ws}
            if who_has:
                s.update_data(who_has=who_has, nbytes={k: nbytes[k] for k in who_has}, client=client)
        keys = [k if isinstance(k, str) else tuple(k) for k in keys]
        present = [k for k in keys if k in s.tasks and s.tasks[k].who_has]
        if len(self.kept) > 4 * len(present) + 1000:  # forget keys released since (not every call)
            self.kept.intersection_update(s.tasks)
        if copies > 1:
            # (those not in memory too: a holder died since, and they are being computed again)
            self.kept.update(k for k in keys if k in s.tasks)
            await self._copy(present, copies)
        # a holder may have died meanwhile: an emptied who_has reads None on recent distributed
        return [len(s.tasks[k].who_has or ()) if k in s.tasks else 0 for k in keys]

    def transition(self, key, start, finish, *args, **kwargs):
        """A kept key computed again (its holder died before its copy was made) is copied too."""
        if finish == "memory" and key in self.kept and self.scheduler.tasks[key].who_wants:  # (not as an input only)
            if not self._recomputed:
                self._repair_soon(recomputed=True)
            self._recomputed.add(key)

    def remove_worker(self, scheduler, worker, **kwargs):
        self._repair_soon()

    def add_worker(self, scheduler, worker):
        self._repair_soon()

    def _repair_soon(self, recomputed=False):
        task = asyncio.get_running_loop().create_task(self._repair(recomputed))
        self._repairs.add(task)
        task.add_done_callback(self._repairs.discard)

    async def _repair(self, recomputed=False):
        """Copy the kept keys (``recomputed``: those computed again since the last such call) held by
        too few workers."""
        s = self.scheduler
        await asyncio.sleep(0)  # after the worker's removal (the transitions of this stimulus) has been filed
        if recomputed:
            keys, self._recomputed = self._recomputed, set()
        if s.status in (Status.closing, Status.closed):  # a cluster shutting down loses its workers
            return
        self.kept.intersection_update(s.tasks)
        want = min(COPIES, len(s.running))
        short = [k for k in (self.kept.intersection(keys) if recomputed else self.kept)
                 if s.tasks[k].state == "memory" and len(s.tasks[k].who_has or ()) < want]
        try:
            await self._copy(short, COPIES)
        except Exception as e:  # a task nobody awaits: asyncio would print the traceback at exit
            logger.warning("daskgrad could not copy %d kept values to a second worker: %r", len(short), e)

    async def _copy(self, keys, copies):
        """Copy each of ``keys`` held by fewer than ``copies`` workers to others, least filled first.

        Scheduler.replicate would do it too, but it logs two events a call, and the event logs
        keep 100,000 entries a topic: scheduler memory would grow by every step's call."""
        s = self.scheduler
        for _ in range(3):  # a recipient may die meanwhile: its copies are tried again elsewhere
            order = sorted(s.running, key=lambda ws: ws.nbytes)
            gathers = {}
            for i, k in enumerate(keys):
                ts = s.tasks.get(k)
                if ts is None or ts.state != "memory" or not ts.who_has:
                    continue
                missing = min(copies, len(order)) - len(ts.who_has)
                for j in range(len(order)):  # spread the copies: start at a different worker each key
                    ws = order[(i + j) % len(order)]
                    if missing <= 0:
                        break
                    if ws not in ts.who_has:
                        gathers.setdefault(ws.address, {})[k] = [h.address for h in ts.who_has]
                        missing -= 1
            if not gathers:
                return
            await asyncio.gather(*(s.gather_on_worker(w, who_has) for w, who_has in gathers.items()))


def install(client):
    """Register :class:`Keeper` on ``client``'s scheduler (again after a scheduler restart)."""
    import sys

    import cloudpickle

    def installed(dask_scheduler=None):
        return "daskgrad_keep" in dask_scheduler.handlers

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if not client.run_on_scheduler(installed):
        client.register_plugin(Keeper(), name=NAME)
