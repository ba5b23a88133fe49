"""The name a task's seconds go under on the dashboard: the VJP rule (``<op>-vjp``) that made its
layer, else its key's prefix (a forward op: ``matmul``, ``add``, ``maximum``).

A rule's output ends in a layer named ``<op>-vjp-<token>`` (:func:`.layers.relabel`), but the layers
the rule builds on the way carry the names of the ops they are: relu's rule is a ``le``, a ``where``
and a ``mul``; matmul's rule makes partial products (``matmul_partial``) and their sums.  Chunk fusion
runs them inside one task with the forward values they need, and metering each part under its own
prefix showed the work as anonymous ``where`` and ``matmul_partial`` bars beside VJP rules of ~0 s.
Each value a rule records carries the rule's name (:func:`.lazy.rule`), and lowering tells which
layers that rule made (:func:`made_by`); a fused task names its parts with :func:`part_name`.
"""
from __future__ import annotations

import re
import threading

from dask.utils import key_split

_BLOCKWISE_INDEX = re.compile(r"(_\.\d+)+$")  # an inner task of a Blockwise-fused task: "<layer>_.0_.1"

_RULE_OF: dict = {}   # layer name -> "<op>-vjp", most recent last
_LIMIT = 1 << 16      # layer names of recent backwards (a loop's steps repeat them; old ones go first)
_lock = threading.Lock()


def made_by(layer_names, rule: str) -> None:
    """Record that the layers ``layer_names`` were made by the VJP rule ``rule`` (``"matmul-vjp"``)."""
    with _lock:
        for name in layer_names:
            _RULE_OF.pop(name, None)
            _RULE_OF[name] = rule
        while len(_RULE_OF) > _LIMIT:
            del _RULE_OF[next(iter(_RULE_OF))]


def part_name(key) -> str:
    """The dashboard's name of the task ``key``: its rule's, or its prefix (:func:`dask.utils.key_split`)."""
    name = key[0] if isinstance(key, tuple) else key
    rule = _RULE_OF.get(name)
    if rule is None and isinstance(name, str):
        rule = _RULE_OF.get(_BLOCKWISE_INDEX.sub("", name))
    return rule if rule is not None else key_split(key)
