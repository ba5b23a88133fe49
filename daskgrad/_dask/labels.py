"""The name a task's seconds go under on the dashboard: the VJP rule (``<op>-vjp``) that made its
layer, else its key's prefix (a forward op: ``matmul``, ``add``, ``maximum``).

A rule's output ends in a layer named ``<op>-vjp-<token>`` (:func:`.layers.relabel`, added when it
is lowered: :func:`.lazy.labelled`), but the layers the rule builds on the way carry the names of
the ops they are: relu's rule is a ``le``, a ``where`` and a ``mul``; matmul's rule makes partial
products (``matmul_partial``) and their sums. Chunk fusion runs them inside one task with the
forward values they need, and metering each part under its own prefix showed the work as anonymous
``where`` and ``matmul_partial`` bars beside VJP rules of ~0 s. Each value a rule records carries
the rule's name (:func:`.lazy.rule`), and lowering tells which layers that rule made
(:func:`made_by`); a fused task names its parts with :func:`part_name`.
"""
from __future__ import annotations

import re
import threading

from dask.utils import key_split

_BLOCKWISE_INDEX = re.compile(r"(_\.\d+)+$")  # an inner task of a Blockwise-fused task: "<layer>_.0_.1"
_INSTANCE = re.compile(r"-[0-9a-f]{32}$")  # a template's key renamed for an instance or a time step: "<layer>-<token>"

_RULE_OF: dict = {}   # layer name -> "<op>-vjp", most recent last
_LIMIT = 1 << 16      # layer names of recent backwards (a loop's steps repeat them; old ones go first)
_lock = threading.Lock()


def made_by(layer_names, rule: str) -> None:
    """Record that the layers ``layer_names`` were made by the VJP rule ``rule`` (``"matmul-vjp"``)."""
    collected = _collecting.into
    with _lock:
        for name in layer_names:
            _RULE_OF.pop(name, None)
            _RULE_OF[name] = rule
            if collected is not None:
                collected[name] = rule
        while len(_RULE_OF) > _LIMIT:
            del _RULE_OF[next(iter(_RULE_OF))]


class _Collecting(threading.local):
    into = None


_collecting = _Collecting()


class collecting:
    """``with collecting() as rules:`` the layer names :func:`made_by` records meanwhile, with their
    rules: a template holds them, and each of its instances records them again (:func:`remember`), so
    an instance run long after its template was lowered is still named by its rules."""

    def __enter__(self):
        self.outer, self.rules = _collecting.into, {}
        _collecting.into = self.rules
        return self.rules

    def __exit__(self, *exc):
        _collecting.into = self.outer
        if self.outer is not None:
            self.outer.update(self.rules)


def remember(rules: dict) -> None:
    """Record ``rules`` (layer name -> rule) again, as most recent."""
    with _lock:
        for name, rule in rules.items():
            _RULE_OF.pop(name, None)
            _RULE_OF[name] = rule
        while len(_RULE_OF) > _LIMIT:
            del _RULE_OF[next(iter(_RULE_OF))]


def part_name(key) -> str:
    """The dashboard's name of the task ``key``: its rule's, or its prefix (:func:`dask.utils.key_split`)."""
    name = key[0] if isinstance(key, tuple) else key
    rule = _RULE_OF.get(name)
    if rule is None and isinstance(name, str):
        name = _BLOCKWISE_INDEX.sub("", name)
        rule = _RULE_OF.get(name)
        while rule is None and _INSTANCE.search(name):  # (an instance of an instance: a step of a loop)
            name = _BLOCKWISE_INDEX.sub("", _INSTANCE.sub("", name))
            rule = _RULE_OF.get(name)
    return rule if rule is not None else key_split(key)
