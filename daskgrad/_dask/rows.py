"""A chunk-fused task run over blocks of rows, so its large chunk is read from memory once.

A training step's fused task reads its data chunk twice: ``X @ w`` in the forward, ``X.T @ dz`` in
the backward, and a chunk of tens of MB has left the CPU's caches between the two.  Run on blocks
of rows that fit in cache (``daskgrad.row-block-bytes``, e.g. 2 MiB; off by default), each part that works row by row
runs on the block while it is cached, and each part that sums over rows (a contraction, a ``sum``)
adds its block's share to a running total; parts that read those totals run once, after the last
block, and parts that read no rows run once, before.

Which parts take part is decided by rules that are exact, not by shapes that happen to match: a
kernel marked ``row_rule`` (:mod:`daskgrad.chunk`), NumPy ufuncs, ``operator``'s arithmetic,
``np.where``, ``np.sum``, ``np.transpose`` and matrix products.  The plan is worked out while the
first block runs; a part no rule covers, or an output that would be split into rows, makes the task
run whole as before (and it is remembered, so that task is not tried again).  Only the rounding of
the totals changes: a sum of block sums instead of one sum.
"""
from __future__ import annotations

import functools
import operator
import time

import numpy as np

from .internals import enforce_dtype

ACC, POST = "acc", "post"  # a value's state, besides None (no rows: whole) and an int (rows on that axis)

_ELEMENTWISE = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
                operator.pow, operator.neg, operator.pos, operator.abs, operator.invert, operator.and_,
                operator.or_, operator.xor, operator.lt, operator.le, operator.gt, operator.ge, operator.eq,
                operator.ne, np.where}
_MATMUL = {np.matmul, operator.matmul}


class Refused(Exception):
    """A part no rule covers: the task runs whole."""


def run(parts, inputs, values, outputs, block_bytes, seconds=None):
    """The fused task's ``outputs`` (a dict by key) computed over row blocks, or ``None`` where its
    largest input is not worth splitting.  Raises :class:`Refused` where a part cannot run on blocks
    or nothing adds up over rows (after running some of the first block: remember it and run the
    task whole).  Outputs that keep their rows are joined from the blocks'.

    ``parts()``: the task's parts in running order, as :class:`Part` s (made only if worth it)."""
    big = max(values, key=_nbytes, default=None)
    if getattr(big, "ndim", 0) < 1 or not _c_contiguous(big):
        return None
    rows = big.shape[0]
    step = max(64, int(block_bytes // max(1, _nbytes(big) // max(rows, 1))))
    if rows < 4 * step:
        return None
    full = {k: v for k, v in zip(inputs, values) if getattr(v, "ndim", 0) >= 1 and v.shape[0] == rows}
    whole = {k: v for k, v in zip(inputs, values) if k not in full}
    state = {**dict.fromkeys(whole), **dict.fromkeys(full, 0)}
    parts = parts()
    try:
        loop, post, totals, first = _first_block(parts, whole, full, state, rows, step, seconds)
    except Refused:
        raise
    except Exception as e:  # (a block's shapes a rule would have refused; or an error the whole task raises)
        raise Refused from e
    if not totals:
        raise Refused  # (nothing summed over rows: no second read of them to save)
    pieces = {k: [first[k]] for k in outputs if isinstance(state[k], int) and k not in full}  # joined at the end
    names = [*totals, *pieces]
    body = _block_function(loop, names) if seconds is None else None
    for start in range(step, rows, step):
        env = dict(whole)
        env.update((k, v[start:start + step]) for k, v in full.items())
        if body is not None:
            shares = body(env)
        else:
            for part in loop:
                env[part.key] = part.timed(env, seconds)
            shares = [env[k] for k in names]
        for k, value in zip(names, shares):
            if k in totals:
                totals[k] = totals[k] + value
            else:
                pieces[k].append(value)
    env = {**whole, **full, **totals}
    env.update((k, np.concatenate(blocks, axis=state[k])) for k, blocks in pieces.items())
    for part in post:
        env[part.key] = part.timed(env, seconds)
    return {k: env[k] for k in outputs}


def _first_block(parts, whole, full, state, rows, step, seconds):
    """Run the first block, deciding each part's place: before (reads no rows: into ``whole``, or
    into ``full`` if it spans the rows, to be cut into blocks as the inputs are), in the loop, or
    after (reads a total).  Returns (loop parts, after parts, totals so far, the block's values)."""
    env, loop, post, totals = dict(whole), [], [], {}
    env.update((k, v[:step]) for k, v in full.items())
    for part in parts:
        states = [state[k] for k in part.reads]
        if all(s is None for s in states):
            out = part.timed(env, seconds)
            if getattr(out, "ndim", 0) >= 1 and out.shape[0] == rows:  # (a gradient's ones, say)
                full[part.key], env[part.key], state[part.key] = out, out[:step], 0
            else:
                whole[part.key] = env[part.key] = out
                state[part.key] = None
        elif any(s in (ACC, POST) for s in states):
            if any(isinstance(s, int) for s in states):
                raise Refused  # a total meeting rows: the total is not known yet
            state[part.key] = POST
            post.append(part)
        else:
            if part.func is None:
                raise Refused
            args, kwargs = part.bind(env)
            rule = _rule_of(part.func, kwargs)
            out = part.timed(env, seconds)
            states = part.bind_states(state)
            if part.func is enforce_dtype:
                kwargs = {k: v for k, v in kwargs.items() if k not in ("enforce_dtype", "enforce_dtype_function")}
                states = (states[0], {k: states[1][k] for k in kwargs})
            state[part.key] = s = rule(args, kwargs, states, out)
            if isinstance(s, int) and out.shape[s] != step:
                raise Refused  # (a rule's bookkeeping gone wrong: never run it split)
            env[part.key] = out
            loop.append(part)
            if state[part.key] == ACC:
                totals[part.key] = out
    return loop, post, totals, env


class Part:
    """One part of a fused task: ``func`` on arguments that are constants, values of the task (by
    key) or lists of those; ``func`` ``None`` for a part called on a dict of the values it reads
    (``call``: the part, its names for the task's keys, and its constants)."""

    __slots__ = ("key", "name", "func", "args", "kwargs", "reads", "call")

    def __init__(self, key, name, func, args, kwargs, reads, call=None):
        # args: ("c", constant) | ("r", key) | ("s", constructor, ((is_ref, key or constant), ...))
        self.key, self.name, self.func, self.args, self.kwargs, self.reads = key, name, func, args, kwargs, reads
        self.call = call

    def bind(self, env):
        return [_arg(a, env) for a in self.args], {k: _arg(a, env) for k, a in self.kwargs.items()}

    def bind_states(self, state):
        return ([_arg(a, state, None) for a in self.args], {k: _arg(a, state, None) for k, a in self.kwargs.items()})

    def __call__(self, env):
        if self.func is None:
            node, names, constants = self.call
            return node({**constants, **{local: env[k] for local, k in names.items()}})
        args, kwargs = self.bind(env)
        return self.func(*args, **kwargs)

    def timed(self, env, seconds):
        if seconds is None:
            return self(env)
        start = time.perf_counter()
        out = self(env)
        seconds[self.name] = seconds.get(self.name, 0.0) + time.perf_counter() - start
        return out


_compiled = {}  # source -> code: every chunk of a layer generates the same source, with other constants


def _block_function(loop, totals):
    """The loop's parts as one generated function of the block's values (a dict), returning the
    block's shares of ``totals``: calling each part through :meth:`Part.bind` cost ~30 us a block,
    as much as the NumPy work of a 2,000-row block."""
    consts, lines, var = {}, [], {}

    def const(value):
        consts[f"c{len(consts)}"] = value
        return f"c{len(consts) - 1}"

    def ref(k):
        if k not in var:
            var[k] = f"v{len(var)}"
            lines.append(f"{var[k]} = env[{const(k)}]")
        return var[k]

    def arg(a):
        if a[0] == "r":
            return ref(a[1])
        if a[0] == "c":
            return const(a[1])
        items = ", ".join(ref(x) if is_ref else const(x) for is_ref, x in a[2])
        return f"[{items}]" if a[1] is list else f"({items},)" if a[2] else "()"

    for part in loop:
        args = [arg(a) for a in part.args]
        if part.kwargs:
            args.append("**{" + ", ".join(f"{const(k)}: {arg(a)}" for k, a in part.kwargs.items()) + "}")
        call = f"{const(part.func)}({', '.join(args)})"
        var[part.key] = f"v{len(var)}"
        lines.append(f"{var[part.key]} = {call}")
    source = ("def block(env):\n" + "".join(f"    {line}\n" for line in lines)
              + f"    return ({''.join(var[k] + ', ' for k in totals)})\n")
    generated(source, "<daskgrad row block>", consts)
    return consts["block"]


def generated(source, filename, env):
    """Define the generated function ``source`` in ``env``, its code compiled once per source (a row
    block's, a fused elementwise chain's: every chunk of a layer generates the same source, with
    other constants in ``env``)."""
    code = _compiled.get(source)
    if code is None:
        if len(_compiled) >= 1024:
            _compiled.clear()
        code = _compiled[source] = compile(source, filename, "exec")
    exec(code, env)


def _arg(a, env, constant=...):
    if a[0] == "r":
        return env[a[1]]
    if a[0] == "s":
        return a[1](env[x] if ref else (x if constant is ... else constant) for ref, x in a[2])
    return a[1] if constant is ... else constant


# ------------------------------------------------------------------ rules: a part's rows from its operands'
def _rule_of(func, kwargs):
    """The rule giving the state of ``func(*args, **kwargs)`` on a block from its operands' states
    (None: no rows; an int: rows on that axis of the block), chosen before the part runs; or
    :class:`Refused`."""
    if func is enforce_dtype:  # dask's elementwise wrapper: the wrapped function's rule
        func = kwargs.get("enforce_dtype_function")
    kind = getattr(func, "row_rule", None)
    if kind in ("matmul", "matmul_partial") or func in _MATMUL:
        return functools.partial(_matmul, partial=kind == "matmul_partial")
    if kind == "elementwise" or func in _ELEMENTWISE or (isinstance(func, np.ufunc) and func.signature is None):
        return _elementwise  # (a ufunc with a signature, as matmul, works on whole axes)
    base = func.func if type(func) is functools.partial and not func.args else func
    if base is np.sum and set(getattr(func, "keywords", {})) <= {"dtype"}:
        return _sum
    if kind == "reduce":
        return _reduce
    if base is np.transpose and func is base:
        return _transpose
    raise Refused


def _elementwise(args, kwargs, states, out):
    """Rows on the same axis counted from the end in every operand that has rows; operands without
    rows must be broadcast along it (size 1 or absent there)."""
    arrays = [*zip(args, states[0]), *((kwargs[k], s) for k, s in states[1].items())]
    if any(isinstance(s, list) for _, s in arrays):
        raise Refused
    back = {getattr(v, "ndim", 0) - s for v, s in arrays if isinstance(s, int)}
    if len(back) != 1:
        raise Refused
    (back,) = back
    for v, s in arrays:
        nd = getattr(v, "ndim", 0)
        if s is None and nd >= back and v.shape[nd - back] != 1:
            raise Refused
    nd = getattr(out, "ndim", 0)
    if nd < back:
        raise Refused
    return nd - back


def _matmul(args, kwargs, states, out, partial):
    """``a @ b`` of at most 2-d operands: rows of ``a`` (not contracted) give rows of the product,
    columns of ``b`` its columns; a contracted axis split in both operands gives a share of a total.
    ``partial``: the product gains a leading axis (:func:`daskgrad.chunk.matmul_partial`)."""
    if kwargs or len(args) != 2:
        raise Refused
    (a, b), (sa, sb) = args, states[0]
    a, sa = _single(a, sa)
    b, sb = _single(b, sb)
    if a.ndim > 2 or b.ndim > 2 or a.ndim == 0 or b.ndim == 0:
        raise Refused
    contracted_a, contracted_b = a.ndim - 1, 0 if b.ndim == 1 else b.ndim - 2
    if sa is not None and sb is not None:
        if sa == contracted_a and sb == contracted_b:
            return ACC
        raise Refused
    if sa is not None:
        if sa == contracted_a:
            raise Refused
        return int(partial)  # a's rows (axis 0 of a 2-d a) are the product's first axis
    if sb == contracted_b:
        raise Refused
    return out.ndim - 1  # b's columns are the product's last axis


def _single(x, s):
    """A contraction's operand handed over as a one-element list (:func:`daskgrad.chunk.matmul`)."""
    if isinstance(x, list):
        if len(x) != 1:
            raise Refused
        return x[0], s[0]
    if isinstance(s, list):
        raise Refused
    return x, s


def _sum(args, kwargs, states, out):
    if len(args) != 1 or set(kwargs) - {"axis", "keepdims", "dtype"} or any(s is not None for s in states[1].values()):
        raise Refused
    return _reduced(args[0], states[0][0], kwargs.get("axis"), kwargs.get("keepdims", False), adds=True)


def _reduce(args, kwargs, states, out):
    """:func:`daskgrad.chunk.reduce`: ``np.<fn>`` within a chunk, its block in nested one-element lists."""
    names = ("block", "fn", "axis", "keepdims")
    bound = {**dict(zip(names, args)), **kwargs}
    bound_states = {**dict(zip(names, states[0])), **states[1]}
    if set(bound) != set(names) or any(bound_states[k] is not None for k in names[1:]):
        raise Refused
    x, s = bound["block"], bound_states["block"]
    while isinstance(x, list):
        (x,), (s,) = x, s
    return _reduced(x, s, bound["axis"], bound["keepdims"], adds=bound["fn"] == "sum")


def _reduced(x, s, axis, keepdims, adds):
    """A reduction over ``axis`` of ``x`` (rows on its axis ``s``): a share of a total if it reduces
    the rows and ``adds``; the rows moved if it reduces other axes."""
    if not isinstance(s, int):
        raise Refused
    axes = range(x.ndim) if axis is None else [axis] if isinstance(axis, int) else list(axis)
    axes = {a % x.ndim for a in axes}
    if s in axes:
        if adds:
            return ACC
        raise Refused  # (a max over rows is not a sum of the blocks')
    return s if keepdims else s - sum(a < s for a in axes)


def _transpose(args, kwargs, states, out):
    x, s = args[0], states[0][0]
    axes = args[1] if len(args) > 1 else kwargs.get("axes")
    if isinstance(s, list) or set(kwargs) - {"axes"} or len(args) > 2:
        raise Refused
    if axes is None:
        return x.ndim - 1 - s
    return [a % x.ndim for a in axes].index(s)


def _nbytes(v):
    return int(getattr(v, "nbytes", 0) or 0)


def _c_contiguous(v):
    flags = getattr(v, "flags", None)
    return bool(getattr(flags, "c_contiguous", False))
