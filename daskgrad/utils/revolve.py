"""The binomial checkpointing schedule of Griewank & Walther's Revolve (ACM TOMS 26(1), 2000,
Algorithm 799): how to reverse ``steps`` time steps holding at most ``snapshots`` states at once
with the fewest forward steps.

With ``c`` snapshots (the initial state's included) and repetition number ``r``, at most
``beta(c, r) = C(c + r, c)`` steps can be reversed evaluating no step more than ``r`` times
forward; reversing ``l`` steps with ``beta(c, r - 1) < l <= beta(c, r)`` takes at least

    t(l, c) = r * l - beta(c + 1, r - 1)

forward steps (advances), and the schedule below takes exactly that many.  Each step is also run
once more, recorded, as part of its own reversal (``Reverse``), as in Revolve's count.

The schedule is a list of actions:

* ``Takeshot(i)``  keep the current state, state ``i``, as a snapshot;
* ``Restore(i)``   the snapshot of state ``i`` becomes the current state;
* ``Advance(i, j)`` run steps ``i .. j - 1`` from state ``i`` to state ``j`` (not recorded);
* ``Reverse(i)``   run step ``i`` recorded from the current state ``i`` and pull the adjoint of
  state ``i + 1`` back to state ``i``.  The first ``Reverse`` is step ``steps - 1`` (Revolve's
  "firsturn"): everything before it is the forward sweep.

It is built by the classic recursion: with state ``a`` stored and ``c`` snapshot slots, advance to
``m``, store it, reverse ``m .. b`` with ``c - 1`` slots, then ``a .. m`` with ``c``; ``m`` is chosen
where both halves use their full repetition count, which gives ``t(l, c)`` exactly.
"""
from __future__ import annotations

from functools import lru_cache
from math import comb
from typing import NamedTuple

__all__ = ["Advance", "Restore", "Reverse", "Takeshot", "repetitions", "schedule"]


class Takeshot(NamedTuple):
    index: int


class Restore(NamedTuple):
    index: int


class Advance(NamedTuple):
    start: int
    stop: int


class Reverse(NamedTuple):
    index: int


def _beta(c, r):
    return comb(c + r, c) if r >= 0 else 0


def _repetition_number(steps, snapshots):
    r = 0
    while _beta(snapshots, r) < steps:
        r += 1
    return r


def repetitions(steps, snapshots):
    """``t(steps, snapshots)``: the fewest forward steps (advances) a reversal of ``steps`` steps
    holding at most ``snapshots`` states (the initial one included) can take."""
    if steps <= 1:
        return 0
    r = _repetition_number(steps, snapshots)
    return r * steps - _beta(snapshots + 1, r - 1)


def _split(length, c):
    """Where the next snapshot goes, counted from the stored state: both halves then use their
    full repetition count (``t`` is convex and piecewise linear in the length, slope ``r``)."""
    r = _repetition_number(length, c)
    return max(1, min(_beta(c, r - 1), length - _beta(c - 1, r - 1), length - 1))


def schedule(steps, snapshots):
    """The Revolve actions reversing ``steps`` steps with ``snapshots`` snapshots (see the module
    docstring).  Snapshots beyond ``steps`` would never be used and are not."""
    return list(_schedule(steps, snapshots))


@lru_cache(maxsize=64)
def _schedule(steps, snapshots):
    # (a pure function of its two numbers, made once for each: an inversion's every gradient asks for the same,
    # a few thousand actions a time loop's recording would otherwise work out again)
    c = min(snapshots, max(steps, 1))
    actions = [Takeshot(0)] if steps else []
    todo = [(0, steps, c)]  # (a, b, slots): reverse steps a .. b-1, state a stored, adjoint of b known
    while todo:
        a, b, c = todo.pop()
        if b - a < 1:
            continue
        if actions[-1] != Takeshot(a):
            actions.append(Restore(a))
        if b - a == 1:
            actions.append(Reverse(a))
        elif c == 1:
            for i in range(b - 1, a - 1, -1):
                if i < b - 1:
                    actions.append(Restore(a))
                if i > a:
                    actions.append(Advance(a, i))
                actions.append(Reverse(i))
        else:
            m = a + _split(b - a, c)
            actions += [Advance(a, m), Takeshot(m)]
            todo += [(a, m, c), (m, b, c - 1)]  # the right part first (a stack)
    return tuple(actions)
