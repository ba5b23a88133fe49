"""A fused chunk's arithmetic as one generated kernel, where numexpr is installed (``daskgrad[fast]``).

A chain of elementwise ops fused into one task (:class:`.lazy.Fused`) runs op by op in NumPy: each
op a pass over the chunk and a temporary as large.  numexpr compiles the chain into one program
that runs over cache-sized blocks of the chunk, so the chain reads its inputs once (and runs on the
threads numexpr is given: ``NUMEXPR_NUM_THREADS`` or ``OMP_NUM_THREADS``, which a dask worker's
nanny sets to 1; otherwise the machine's cores, for the threads of a local run).

The bits are NumPy's: only ``+ - * /`` and negation, every operand and result of one dtype
(float32 or float64), each operation in the chain's order.  Every number enters as a 0-d operand
of that dtype (NumPy converts a Python number so, NEP 50), never as a literal: numexpr rewrites
``x / 3.0`` as ``x * 0.333...``, which rounds differently.  Anything else -- another op or dtype,
another chunk type (cupy, a strict duck array), a chunk smaller than ``MIN_ELEMENTS``, where
numexpr's call costs more than it saves -- runs in NumPy as before; dask config
``daskgrad.elementwise-kernels: False`` runs every chain in NumPy.
"""
from __future__ import annotations

import operator
import re

import dask
import numpy as np

# below this a chunk's chain runs in NumPy.  Measured on 2 cores (benchmarks' machine): from about 1M elements
# (8 MB of float64, out of cache) numexpr takes 0.7-0.9x NumPy's time for a 4-op chain and 0.3-0.5x for a
# 9-tap stencil; a chunk that fits in cache NumPy runs faster (numexpr: 1.3-3x, its call and block copies)
MIN_ELEMENTS = 1 << 20

_BINARY = {operator.add: "+", np.add: "+", operator.sub: "-", np.subtract: "-", operator.mul: "*",
           np.multiply: "*", operator.truediv: "/", np.true_divide: "/"}
_UNARY = {operator.neg: "-", np.negative: "-"}
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_SIGNATURE = {np.dtype(np.float32): float, np.dtype(np.float64): np.float64}  # (numexpr's names: float is float32)

_numexpr = []  # [module or None], imported on first use


def numexpr():
    """The numexpr module, or None where it is not installed."""
    if not _numexpr:
        try:
            import numexpr as ne
        except ImportError:
            ne = None
        _numexpr.append(ne)
    return _numexpr[0]


def enabled():
    return dask.config.get("daskgrad.elementwise-kernels", True) and numexpr() is not None


class Kernel:
    """A chain's ``steps`` (:class:`.lazy.Fused`'s) as one numexpr expression: ``expression`` over the
    blocks ``i{j}`` for ``j`` in ``inputs`` and the numbers ``c0 ..`` (``numbers``), compiled once per dtype."""

    __slots__ = ("expression", "inputs", "numbers", "_compiled")

    @classmethod
    def of(cls, steps):
        """The kernel of ``steps``, or None where an op or a number is not one it runs bit for bit."""
        exprs, numbers, inputs = [], [], set()
        for fn, refs in steps:
            args = []
            for kind, v in refs:
                if kind == 0:
                    args.append(f"i{v}")
                    inputs.add(v)
                elif kind == 1:
                    args.append(exprs[v])
                elif type(v) in (int, float):  # (a bool, a NumPy scalar: dtypes of their own)
                    args.append(f"c{len(numbers)}")
                    numbers.append(v)
                else:
                    return None
            if fn in _BINARY and len(args) == 2:
                exprs.append(f"({args[0]} {_BINARY[fn]} {args[1]})")
            elif fn in _UNARY and len(args) == 1:
                exprs.append(f"(-{args[0]})")
            else:
                return None
        if not exprs:
            return None
        self = cls()
        names = set(re.findall(r"\b[ic]\d+\b", exprs[-1]))  # (what a step nothing reads used is not passed)
        self.expression = exprs[-1]
        self.inputs = tuple(j for j in sorted(inputs) if f"i{j}" in names)
        self.numbers = tuple((j, v) for j, v in enumerate(numbers) if f"c{j}" in names)
        self._compiled = {}
        return self

    def __call__(self, blocks):
        """The chain's result on ``blocks``, or None where NumPy must run it (see the module docstring)."""
        if not self.inputs or self.inputs[-1] >= len(blocks):
            return None
        blocks = [blocks[j] for j in self.inputs]
        dtype = blocks[0].dtype if type(blocks[0]) is np.ndarray else None
        if dtype not in _DTYPES or max(b.size for b in blocks) < MIN_ELEMENTS or not enabled():
            return None
        for b in blocks:
            if type(b) is not np.ndarray or b.dtype != dtype:
                return None
        run = self._compiled.get(dtype)
        if run is None:
            names = [f"i{j}" for j in self.inputs] + [f"c{j}" for j, _ in self.numbers]
            run = self._compiled.setdefault(  # (two threads may both compile it: either is the same program)
                dtype, numexpr().NumExpr(self.expression, signature=[(n, _SIGNATURE[dtype]) for n in names]))
        return run(*blocks, *(np.asarray(v, dtype) for _, v in self.numbers))


def weighted_sum(terms, weights):
    """``sum_k weights[k] * (terms[k][0] + terms[k][1] + ...)`` in that order (a stencil's taps of one
    weight summed, then multiplied: :func:`daskgrad.ops.stencil._correlate_block`), as one numexpr
    program over NumPy float arrays of one dtype; None where NumPy must run it."""
    first = terms[0][0]
    if type(first) is not np.ndarray or first.dtype not in _DTYPES or first.size < MIN_ELEMENTS or not enabled():
        return None
    if any(type(t) is not np.ndarray or t.dtype != first.dtype for ts in terms for t in ts):
        return None
    ne, dtype = numexpr(), first.dtype
    key = (tuple(len(ts) for ts in terms), tuple(w == 1.0 for w in weights), dtype)
    run = _sums.get(key)
    if run is None:
        names, parts = [], []
        for k, ts in enumerate(terms):
            part = ""
            for j in range(len(ts)):
                names.append(f"t{k}_{j}")
                part = f"t{k}_{j}" if not part else f"({part} + t{k}_{j})"
            if len(ts) == 1 or weights[k] != 1.0:  # (a lone tap is multiplied even by 1, as NumPy's path does)
                names.append(f"w{k}")
                part = f"({part} * w{k})"
            parts.append(part)
        expression = parts[0]
        for p in parts[1:]:
            expression = f"({expression} + {p})"
        run = _sums.setdefault(key, ne.NumExpr(expression, signature=[(n, _SIGNATURE[dtype]) for n in names]))
    args = []
    for ts, w in zip(terms, weights):
        args.extend(ts)
        if len(ts) == 1 or w != 1.0:
            args.append(np.asarray(w, dtype))
    return run(*args)


_sums = {}  # (taps per weight, which weights are 1, dtype) -> compiled program
