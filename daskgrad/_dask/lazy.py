"""Arrays not built yet: what an op records instead of a dask graph.

An op's result is a :class:`Lazy`: the function that makes its dask array (the op's forward, which
takes dask arrays), what it reads (other Lazy values, dask arrays, Python numbers) and its plain
parameters -- and, known at once, its abstract value: shape, chunks, dtype and chunk type (meta).
Nothing is built while a program is recorded, so recording costs the same whatever its depth, and
what daskgrad caches and instantiates is the recorded program (:mod:`.program`), never dask's graph.

The abstract value comes from running the forward once on stand-ins, arrays with the real chunks
and meta but no graph (:func:`defer`), remembered per function, parameters and kinds of operands,
so a loop's ops infer it once; elementwise ops infer it as dask does, from their operands' dtypes
and metas, with no dask call.  A forward that needs its operands' values (unknown chunk sizes
after a boolean mask) runs on the real arrays at once, as before.

:meth:`Lazy.build` lowers a value to a dask array on request (``tensor.array``): each op's forward
on stand-ins named as its operands' arrays, every layer joined once (dask copies every input's
layers into each array it makes, which would cost O(N²) for a chain of N ops).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import operator
import struct
import threading
import types

import cloudpickle
import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.utils import funcname

from .fold import flat_layers, fold
from .optimize import materialized
from . import kernels
from .internals import (DataNode, GraphNode, elemwise, HighLevelGraph, MaterializedLayer, TaskRef, array, blockwise,
                        chunk_getitem, clientless, concatenate_lookup, local_scheduler_asked)
from .labels import made_by
from .rows import generated
from .layers import _ARRAYS, elementwise_aval, elementwise_layer, exact, relabel

# held while a submission makes its program (from Program.of to its instance): a Lazy value that another
# thread's submission computed meanwhile would otherwise change under it (Lazy.becomes), and the program
# lowered would not be the one keyed
building = threading.RLock()


class Lazy:
    """An op's result not built yet (see the module docstring): ``fn(*srcs, **params)`` makes its
    dask array.  ``computed``: the dask array holding its value in (cluster) memory, once a
    submission computed it and something holds it (a later program reads that as a slot instead
    of computing it again); ``_built``: its dask graph, lowered on request (:meth:`build`), not
    computed."""

    __slots__ = ("fn", "srcs", "params", "dtype", "_meta", "chunks", "shape", "ndim", "elementwise", "annotations",
                 "rule", "label", "many", "seen", "computed", "_built", "frozen_params", "__weakref__")

    def __init__(self, fn, srcs, params, dtype, meta, chunks, elementwise=False, shape=None):
        self.fn, self.srcs, self.params, self.elementwise = fn, srcs, params, elementwise
        self.dtype, self._meta, self.chunks = dtype, meta, chunks
        self.shape = tuple(sum(c) for c in chunks) if shape is None else shape  # (given: an operand's, same chunks)
        self.ndim = len(chunks)
        # dask.annotate's annotations where it was recorded (GPU placement of a rule's tasks), which its
        # layers carry when built, outside that context
        self.annotations = _annotations.get() or None
        self.rule = _making.rule  # the VJP rule that recorded it (the dashboard's name for it)
        self.label = None  # a rule's output: its array ends in a layer named ``<label>-<token>`` (see labelled)
        self.many = 0  # a group: fn returns this many arrays, each read through a component (defer_many)
        self.seen = 0  # how many submissions computed it (see daskgrad._dask.program.Program.computed_again)
        self.computed = self._built = None
        self.frozen_params = None  # frozen(params), where known already (a Piece's values: made once for all)

    def __repr__(self):
        return f"Lazy({funcname(self.fn)}, shape={self.shape}, dtype={self.dtype})"

    @property
    def numblocks(self):
        return tuple(len(c) for c in self.chunks)

    @property
    def npartitions(self):
        n = 1
        for c in self.chunks:
            n *= len(c)
        return n

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def becomes(self, array):
        """Its value is ``array`` (in memory) from now on: it is remade as reading that value alone,
        letting go of what it was computed from.  (A functional update loop, ``x = x - lr * g``,
        otherwise kept every step's values and graph: each step's ``x`` read the last.)  Not while
        another thread makes a program that reads it (:data:`building`)."""
        with building:
            self.computed = array
            if self.fn is not _alias and not self.many:
                self.fn, self.srcs, self.params, self.elementwise, self._built = _held, (array,), (), False, None
                self.frozen_params = self.label = None

    def build(self):
        """The dask array (built once, with the Lazy values it reads: see :func:`build`)."""
        if self.fn is _alias:
            return value_of(through(self))
        if self.computed is not None:
            return self.computed
        if self._built is None:
            build([self])
        return self._built if self.computed is None else self.computed


_ARRAYS.add(Lazy)  # (an array operand to elementwise_aval)


class _AnnotationsCall:  # (a dask without the context variable: its call)
    get = staticmethod(dask.get_annotations)


# dask.annotate's annotations now (dask.get_annotations() without its call: every recorded value reads them)
_annotations = getattr(dask.base, "_annotations", _AnnotationsCall)


class _Making(threading.local):
    rule = None  # (each thread starts with it: read as an attribute, not by getattr with a default, which is slow)


_making = _Making()


@contextlib.contextmanager
def rule(name):
    """Within, the values recorded are ``name``'s (a VJP rule, ``"matmul-vjp"``): their layers show on
    the dashboard under it (:mod:`.labels`), whatever ops they are."""
    before = _making.rule
    _making.rule = name
    try:
        yield
    finally:
        _making.rule = before


def _held(a):
    return a  # (a value computed for good: see Lazy.becomes)


def _alias(a):
    return a  # (never run: an alias is read through, see through)


def alias(value):
    """A Lazy value standing for ``value`` (a Lazy value or a dask array), to be rebound with
    :func:`rebind`: a compiled function's program reads its arguments through aliases, rebound to
    each call's values."""
    return Lazy(_alias, (value,), (), value.dtype, value._meta, value.chunks)


def rebind(node, value):
    """Point alias ``node`` at ``value`` (None: at nothing, an empty stand-in of its kind)."""
    node.srcs = (stand_in(node, "unbound") if value is None else value,)


def through(x):
    """``x``, or what the alias ``x`` stands for (followed to the end)."""
    while type(x) is Lazy and x.fn is _alias:
        x = x.srcs[0]
    return x


def value_of(x):
    """A Lazy value's dask array as it stands (computed, built, or built now); a constant's 0-d array;
    anything else as it is."""
    return x.build() if type(x) is Lazy else x.array if type(x) is Constant else x


# ------------------------------------------------------------------ recording
def defer(fn, srcs, params=(), elementwise=False):
    """``fn(*srcs, **dict(params))`` not built yet: a :class:`Lazy` knowing its result's abstract
    value, or, where that cannot be known without the values (unknown chunk sizes), the dask array
    built now.  ``srcs``: Lazy values, dask arrays and constants; ``params``: ``(name, value)``
    pairs.  ``elementwise``: ``fn`` is an operator, a NumPy ufunc or a dask one (its dtype and meta
    are inferred as dask's ``elemwise`` infers them, with no dask call)."""
    srcs = tuple(srcs)
    if fn is basic_index:
        view = _slice_in_memory(srcs[0], params)
        if view is not None:
            return view
    if elementwise:
        aval = elementwise_aval(fn, srcs) if not params else None
        if aval is not None:  # (the common case of a loop's small ops: kept lean)
            dtype, meta, chunks = aval
            shape = None  # (an operand's, where the chunks are its: not summed again)
            for s in srcs:
                if (type(s) is Lazy or isinstance(s, da.Array)) and s.chunks is chunks:
                    shape = s.shape
                    break
            if len(srcs) == 2 and (type(srcs[0]) is float or type(srcs[1]) is float) and fn in _LIFTED:
                srcs = _lifted(srcs, dtype)
            return Lazy(fn, srcs, (), dtype, meta, chunks, True, shape)
        if getattr(fn, "elementwise_kernel", False) and not params:  # (chunks that do not line up: dask's
            fn, params = unified, (("op", fn),)                         # elemwise rechunks; the kernel reads blocks)
    fparams = _frozen_once(params)
    aval = _aval(fn, srcs, params, fparams)
    if aval is None:  # the forward needs its operands' values: build it now, as dask would
        return fn(*[value_of(s) for s in srcs], **dict(params))
    v = Lazy(fn, srcs, params, *aval)
    v.frozen_params = fparams
    return v


def unified(*arrays, op):
    """An elementwise chunk kernel ``op`` on dask arrays whose chunks do not line up: dask's ``elemwise``
    rechunks them to common chunks and applies ``op`` block by block (run on the arrays themselves, a
    kernel would read a whole operand, a 0-d one as a number)."""
    return elemwise(op, *arrays)


def basic_index(a, *, index, meta):
    """``a[index]``, a basic index (ints, slices, None: dask's own); ``meta``: what its VJP reads."""
    return a[index]


def _slice_in_memory(src, params):
    """``src[index]`` without its offsets in the program where ``src`` is in (cluster) memory and
    ``index`` is a slice on each axis (step 1) that takes whole chunks of it or part of one chunk
    (on one axis also parts of two that together are no longer than the longer: one chunk); else
    None.  Whole chunks are a value in memory at once: a dask array holding those chunks under keys
    of its own, no task (on a cluster their Futures, which a submission reads as the keys they are:
    :func:`.program._slot_key`).  Part of a chunk is that part made now, as dask's getitem task makes
    it, on dask's local schedulers (parts of two joined: :func:`_join`); on a cluster a task cuts it
    (:func:`part_of`, from both chunks for parts of two) where it starts, a slot of the program.
    Parts of more chunks (a minibatch longer than a chunk) are a getitem of the chunks spanned,
    its offsets within them in the program's key: one program for each way a minibatch lies across
    chunks (two for minibatches of 1,500 rows in chunks of 1,000).  A minibatch
    ``X[i * b:(i + 1) * b]`` of a dataset in memory is then one program for every ``i`` (or a few):
    its offsets in the program's key made one program per minibatch, lowered twice each before a
    template was made, and a loop over more minibatches than the cache holds never made one.  Not
    of an alias (a compiled function's argument, a time loop's carry): its value changes at each call."""
    if type(src) is Lazy and src.fn is _alias:
        return None  # (an argument of a compiled function or a time loop's step: rebound at every call)
    index = dict(params)["index"]
    for i in index:
        if type(i) is not slice:  # (x[0]: no such slice, as _span finds; known before the graph is read)
            return None
    a = src.computed if type(src) is Lazy else src
    if not isinstance(a, da.Array) or len(index) != a.ndim or any(n != n for n in a.shape) or not materialized(a):
        return None
    spans = [_span(i, c, n) for i, c, n in zip(index, a.chunks, a.shape)]
    if None in spans:
        return None
    ranges, parts = [(lo, hi) for lo, hi, _ in spans], [p for _, _, p in spans]
    # parts of more than two chunks, or of two longer than one: not cut by one task
    spans_more = any(p is not None and (hi - lo > 2 or hi - lo == 2 and p.stop - p.start > max(c[lo:hi]))
                     for (lo, hi), p, c in zip(ranges, parts, a.chunks))
    if all(p is None and lo == 0 and hi == len(c) for (lo, hi), c, p in zip(ranges, a.chunks, parts)):
        return None  # (all of it: an alias, torch's node, as dask's own)
    joined = [d for d, ((lo, hi), p) in enumerate(zip(ranges, parts)) if p is not None and hi - lo == 2]
    if len(joined) > 1 and not spans_more:
        return None
    (layer,) = a.dask.layers.values()
    in_process = not isinstance(layer[(a.name,) + tuple(lo for lo, _ in ranges)], TaskRef)  # (a cluster's: Futures)
    if spans_more or not in_process:
        joined = []  # (parts of two chunks on workers: both chunks are the slot, the task that cuts joins them)
    # (not dask's name for a[index], "getitem-": a graph may hold both, and this one may hold other chunks)
    name = "taken-" + tokenize(a.name, index)
    values = {}  # key -> the chunk it holds, or the two whose parts it joins (on the axis joined)
    for idx in np.ndindex(*(1 if d in joined else hi - lo for d, (lo, hi) in enumerate(ranges))):
        at = [(a.name,) + tuple(lo + j + (k if d in joined else 0) for d, ((lo, _), j) in enumerate(zip(ranges, idx)))
              for k in range(2 if joined else 1)]
        got = [v.value if isinstance(v, DataNode) else v for v in map(layer.__getitem__, at)]
        values[(name,) + idx] = got if joined else got[0]
    cut = tuple(slice(None) if p is None else p for p in parts)
    if any(p is not None for p in parts) and in_process and not spans_more:
        # (made as dask's task makes it: a part under half its chunk is copied, aligned for BLAS; else a view)
        values = {k: _join(v, cut, joined[0], a.chunks[joined[0]][ranges[joined[0]][0]]) if joined
                  else chunk_getitem(v, cut) for k, v in values.items()}
        parts = [None if p is None else (p.stop - p.start,) for p in parts]
    chunks = tuple(p if type(p) is tuple else c[lo:hi] for (lo, hi), c, p in zip(ranges, a.chunks, parts))
    taken = array(HighLevelGraph({name: MaterializedLayer(values)}, {name: set()}), name, chunks, a._meta)
    if spans_more:  # a getitem of the chunks spanned (dask's: its offsets within them in the key)
        params = (("index", cut),) + tuple(kv for kv in params if kv[0] != "index")
        return Lazy(basic_index, (taken,), params, *_aval(basic_index, (taken,), params, _frozen_once(params)))
    axes = tuple(d for d, p in enumerate(parts) if type(p) is slice)
    if not axes:
        return taken
    # part of a chunk on a worker: a task cuts it there, from where it starts on each axis (a slot, not
    # part of the program's key: one program for every minibatch of a chunk's size)
    return defer(part_of, (taken,) + tuple(Constant(np.int64(parts[d].start)) for d in axes),
                 (("axes", axes), ("sizes", tuple(parts[d].stop - parts[d].start for d in axes))))


def _span(index, chunks, n):
    """``(lo, hi, part)`` of a slice ``index`` (step 1) of an axis of ``n`` elements in ``chunks``: it
    reads chunks ``lo`` to ``hi`` (not included), ``part`` of them (a slice from the start of chunk ``lo``)
    or all of them (None); None where it is no such slice."""
    if type(index) is not slice:
        return None
    start, stop, step = index.indices(n)
    if step != 1 or start >= stop:
        return None
    bounds = np.cumsum((0,) + chunks).tolist()
    lo = int(np.searchsorted(bounds, start, side="right")) - 1
    hi = int(np.searchsorted(bounds, stop, side="left"))
    return lo, hi, None if bounds[lo] == start and bounds[hi] == stop else slice(start - bounds[lo], stop - bounds[lo])


def _join(pair, cut, axis, first):
    """The part ``cut`` of two chunks joined on ``axis`` (the first ``first`` long), made of their parts."""
    head, tail = list(cut), list(cut)
    head[axis], tail[axis] = slice(cut[axis].start, first), slice(0, cut[axis].stop - first)
    pieces = [chunk_getitem(pair[0], tuple(head)), chunk_getitem(pair[1], tuple(tail))]
    return concatenate_lookup.dispatch(type(pieces[0]))(pieces, axis=axis)


def part_of(a, *starts, axes, sizes):
    """The part of ``a`` (one chunk on each of ``axes``, or two on one of them: the part across
    their edge) that starts at ``starts`` (0-d arrays), of ``sizes`` elements, on each of ``axes``."""
    across = [d for d in axes if len(a.chunks[d]) == 2]
    if not across:
        chunks = tuple((sizes[axes.index(d)],) if d in axes else c for d, c in enumerate(a.chunks))
        return da.map_blocks(_cut, a, *starts, axes=axes, sizes=sizes, chunks=chunks, dtype=a.dtype, meta=a._meta)
    (axis,) = across
    out = tuple(range(a.ndim))  # (the axis across: a new index in the output, both its chunks one list in a task)
    return da.blockwise(_cut_across, out, a, tuple(a.ndim if d == axis else d for d in out),
                        *(x for s in starts for x in (s, ())), axes=axes, sizes=sizes, axis=axis,
                        new_axes={axis: sizes[axes.index(axis)]},
                        adjust_chunks={d: sizes[axes.index(d)] for d in axes if d != axis},
                        dtype=a.dtype, meta=a._meta, concatenate=False)


def _cut(block, *starts, axes, sizes):
    return chunk_getitem(block, _cuts(block.ndim, starts, axes, sizes))


def _cut_across(pair, *starts, axes, sizes, axis):
    return _join(pair, _cuts(pair[0].ndim, starts, axes, sizes), axis, pair[0].shape[axis])


def _cuts(ndim, starts, axes, sizes):
    index = [slice(None)] * ndim
    for d, start, n in zip(axes, starts, sizes):
        index[d] = slice(int(start), int(start) + n)
    return tuple(index)


# Arithmetic with a Python float (a learning rate, Adam's bias correction, a time step's
# coefficient) reads the number as a 0-d value in memory of the result's dtype: a program that
# differs from the last only in such numbers has the same key and runs as an instance of its template
# (a number computed anew each step made every step of a training loop a new program).  Only where
# the array operand already has the result's dtype: NumPy then converts the number to that dtype
# (NEP 50), as the 0-d value is, and computes the same bits.
_LIFTED = frozenset({operator.add, operator.sub, operator.mul, operator.truediv})


def _lifted(srcs, dtype):
    a, b = srcs
    if type(b) is float and isinstance(a, (Lazy, da.Array)) and a.dtype == dtype and dtype.kind == "f":
        return a, Constant(dtype.type(b))
    if type(a) is float and isinstance(b, (Lazy, da.Array)) and b.dtype == dtype and dtype.kind == "f":
        return Constant(dtype.type(a)), b
    return srcs


class Constant:
    """A number an op reads as a 0-d value in memory (a NumPy scalar ``v``): its dask array is made
    when a program is lowered or submitted (recording builds no graph), named by its dtype and value
    (a time step's body holds its numbers as they are, and is one body for equal numbers)."""

    __slots__ = ("v", "_array")
    ndim, chunks = 0, ()

    def __init__(self, v):
        self.v, self._array = v, None

    @property
    def dtype(self):
        return self.v.dtype

    @property
    def _meta(self):  # (a 0-d operand to an elementwise op's abstract value: it broadcasts)
        return np.empty((), self.v.dtype)

    @property
    def array(self):
        if self._array is None:
            # (a learning rate read every step: one array, made once; not under dask.annotate, whose
            # annotations a layer made there carries, and which another program must not inherit)
            key = None if dask.get_annotations() else (self.v.dtype.str, self.v.tobytes())
            self._array = _constants.get(key)
            if self._array is None:
                name = f"scalar-{self.v.dtype.str[1:]}-{self.v.tobytes().hex()}"  # (its bits: every NaN's hex is "nan")
                layer = MaterializedLayer({(name,): DataNode((name,), self.v)})
                self._array = array(HighLevelGraph({name: layer}, {name: set()}), name, (), np.empty((), self.v.dtype))
                if key is not None:
                    if len(_constants) >= 4096:
                        _constants.clear()
                    _constants[key] = self._array
        return self._array

    def __repr__(self):
        return f"Constant({self.v!r})"


_constants = {}  # (dtype, bytes) -> a Constant's dask array (an array is never changed once made)


def _component(group, *, i):
    return group[i]  # (never run: lowering names a component as its group's i-th array)


def defer_many(fn, srcs, params, avals):
    """``fn(*srcs, **dict(params))`` returning one dask array per ``(dtype, meta, chunks)`` of
    ``avals``, not built yet: one Lazy value each (components of one group, built together)."""
    group = Lazy(fn, tuple(srcs), tuple(params), *avals[0])
    group.many = len(avals)
    return [Lazy(_component, (group,), (("i", i),), *aval) for i, aval in enumerate(avals)]


# ------------------------------------------------------------------ a piece of program, made again
class Piece:
    """The Lazy values some code recorded, as a recipe: made again (:meth:`again`) on other values
    of what that code read, without running it.  The engine keeps the reverse pass so (its VJP
    rules are pure functions of the graph's structure, which its key holds): a training loop's
    backward records its rules once.  ``eqns``: per value made, ``(fn, srcs, params, frozen params,
    dtype, meta, chunks, elementwise, shape, annotations, rule, label, many)`` with each src a reference --
    ``("x", j)``: the ``j``-th value read, ``("e", j)``: the ``j``-th value made, ``("c", v)``: a
    constant ``v``; ``outputs``: a reference each.  It holds no value it read."""

    __slots__ = ("eqns", "outputs")

    def __init__(self, outputs, read):
        """``outputs``: the values the code made (or passed through); ``read``: ``id(value) -> j``
        for every value it may have read.  :class:`NoKey` where a value made reads anything else: a
        dask array, a value computed or held in memory, a param holding an array."""
        made, eqns = {}, []

        def ref(v):
            j = read.get(id(v))
            if j is not None:
                return ("x", j)
            if type(v) is Lazy:
                return ("e", made[id(v)])
            if isinstance(v, da.Array):
                raise NoKey(type(v))  # (a dask array this code did not read as its input: not a recipe)
            return ("c", v)  # (a number, a Constant: the same in every run its key allows)

        stack = [v for v in outputs if type(v) is Lazy and id(v) not in read]
        while stack:  # depth first, each value after what it reads (a reverse pass is as deep as the program)
            v = stack[-1]
            if id(v) in made:
                stack.pop()
                continue
            if v.computed is not None or v.fn is _held or v.fn is _alias:
                raise NoKey(v)
            waiting = [s for s in v.srcs if type(s) is Lazy and id(s) not in read and id(s) not in made]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            params = frozen(v.params, objects=False) if v.params else ()  # (NoKey: a param holding an object)
            made[id(v)] = len(eqns)
            eqns.append((v.fn, tuple(ref(s) for s in v.srcs), v.params, params, v.dtype, v._meta, v.chunks,
                         v.elementwise, v.shape, v.annotations, v.rule, v.label, v.many))
        self.eqns, self.outputs = tuple(eqns), tuple(ref(v) for v in outputs)

    def again(self, values):
        """The outputs made anew, reading ``values`` (in the order of ``read``'s indices)."""
        made = []
        for fn, srcs, params, fparams, dtype, meta, chunks, elementwise, shape, notes, rule, label, many in self.eqns:
            v = Lazy(fn, tuple(values[j] if k == "x" else made[j] if k == "e" else j for k, j in srcs), params,
                     dtype, meta, chunks, elementwise, shape)
            v.annotations, v.rule, v.label, v.many, v.frozen_params = notes, rule, label, many, fparams
            made.append(v)
        return [values[j] if k == "x" else made[j] if k == "e" else j for k, j in self.outputs]


# ------------------------------------------------------------------ keys
class NoKey(Exception):
    """A value with no exact hashable form here (see :func:`frozen`)."""


_INTS = object()  # (frozen: the tag of a tuple or list of ints, which is its own exact key)


def _bits(x):
    return struct.pack("<d", x)
_SMALL = 4096  # bytes: a NumPy array this small is frozen as its bytes, a larger one as dask's token of them


class _Freezing(threading.local):
    changeable = 0  # how many values :func:`frozen` met that may change in place (see _frozen_once)
    held = False  # (a program's key: a writeable NumPy array by its identity too, see frozen_held)


_freezing = _Freezing()


def frozen_held(v, objects=True):
    """``frozen(v, objects)`` for a program's key (or a compiled call's guard): a writeable NumPy array by
    its identity too (held), since the template (or trace) made from it reads that array, whose values
    may change after its key was made; a read-only one (an op's own copy) by its values alone."""
    _freezing.held, was = True, _freezing.held
    try:
        return frozen(v, objects)
    finally:
        _freezing.held = was


def _writeable(a):
    """Whether NumPy array ``a``'s values can change in place: it, or an array it views, is writeable
    (a read-only view of a writeable array changes with it), or it views other memory."""
    while a is not None:
        if not isinstance(a, np.ndarray):
            return not isinstance(a, bytes)
        if a.flags.writeable:
            return True
        a = a.base
    return False


def frozen(v, objects=True):
    """``v`` as a hashable value equal exactly when the values are (:class:`NoKey` where it has no
    such form here): numbers by type and bits (``0.0`` and ``-0.0``, ``1`` and ``1.0`` differ),
    containers by their items, NumPy arrays and scalars by type, dtype, shape and bytes, a closure
    by its code and captured values, functions and other hashable objects by themselves (identity:
    held; ``objects=False``: only functions, types and ufuncs are, other objects have no key)."""
    t = type(v)
    if t is int or t is bool or t is str or v is None:
        return (t, v)
    if t is float:
        return (t, v.hex() if v == v else _bits(v))  # (every NaN's hex is "nan": its sign and payload by its bits)
    if t is tuple or t is list:
        if t is list:
            _freezing.changeable += 1
        for o in v:
            if type(o) is not int:
                return _frozen_items(t, v, objects)
        return (_INTS, t, tuple(v))  # (shapes, chunks: the common case, exact as it is)
    if t is type:  # (a class is itself: the chunk type in an op's meta; early, as dtypes, for a loop's many ops)
        return v
    if isinstance(v, np.dtype):
        return _dtype(v)
    if t is complex:
        return (t, frozen(v.real), frozen(v.imag))
    if t is dict:
        _freezing.changeable += 1
        return (dict,) + tuple(sorted(((frozen(k), frozen(o, objects)) for k, o in v.items()), key=repr))
    if t is slice:  # (its ints inline)
        return (slice,) + tuple([(int, x) if type(x) is int else frozen(x, objects) for x in (v.start, v.stop, v.step)])
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            raise NoKey(t)
        _freezing.changeable += 1  # (an empty one too: its shape can be set in place)
        # (dask's token of an array is of its bytes in memory order and its shape: a square array and its
        # transpose have one token, so the strides are part of the key)
        key = (t, _dtype(v.dtype), v.shape, v.tobytes() if v.nbytes <= _SMALL else (tokenize(v), v.strides))
        # (an empty one by its shape and dtype alone: an op's meta, a new object with every array, would
        # otherwise make every step's program another)
        return key + (_Same(v),) if _freezing.held and v.size and _writeable(v) else key
    if isinstance(v, np.generic):
        if t is np.void:  # (a structured scalar may be a view of an array's record)
            _freezing.changeable += 1
        return (t, _dtype(v.dtype), v.tobytes())
    if t is functools.partial:
        return (t, frozen(v.func, objects), frozen(v.args, objects), frozen(v.keywords, objects))
    if t is types.FunctionType and (v.__closure__ or v.__defaults__ or v.__kwdefaults__):
        _freezing.changeable += 1
        try:  # a closure made afresh (an op's kernel) is what it runs: its code and captured values
            cells = tuple(frozen(c.cell_contents, objects) for c in v.__closure__ or ())
        except ValueError:  # a cell not filled yet
            raise NoKey(t) from None
        key = (t, v.__code__, cells, frozen(v.__defaults__, objects), frozen(v.__kwdefaults__, objects))
        return key + _globals_sent(v) if v.__module__ == "__main__" else key
    if t is types.FunctionType and v.__module__ == "__main__":
        _freezing.changeable += 1
        return (t, v) + _globals_sent(v)
    if v is Ellipsis:
        return (t,)
    if not objects and not isinstance(v, _ITSELF):
        raise NoKey(t)
    try:
        hash(v)
    except TypeError:
        raise NoKey(t) from None
    return v


def _frozen_items(t, v, objects):
    """:func:`frozen` of a tuple or list ``v`` (of type ``t``) that holds more than ints: an op's params, whose
    names, ints, None, classes, shapes and dtypes are frozen here as frozen() freezes them, without a call each."""
    out = [t]
    for o in v:
        to = type(o)
        if to is str or to is int or to is bool or o is None:
            out.append((to, o))
        elif to is type:
            out.append(o)
        elif to is tuple:
            for p in o:
                if type(p) is not int:
                    out.append(frozen(o, objects))
                    break
            else:
                out.append((_INTS, tuple, o))
        elif isinstance(o, np.dtype):
            out.append(_dtype(o))
        else:
            out.append(frozen(o, objects))
    return tuple(out)


class _Same:
    """A value in a key by its identity (held), hashable or not."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is _Same and other.v is self.v

    def __hash__(self):
        return id(self.v)


_PLAIN = (int, float, bool, str, complex, type(None))
_global_names = {}  # code object -> the global names it (and the code inside it) reads
class _Sending(threading.local):
    def __init__(self):
        self.busy = set()  # the functions of __main__ whose globals are being read (one that calls itself)


_sending = _Sending()


def _globals_sent(fn):
    """The module globals a function of ``__main__`` reads, as cloudpickle sends them with it to a
    cluster's workers (by value: the workers cannot import ``__main__``): numbers and strings by
    value, another function of ``__main__`` by what it reads too, anything else by its pickled bytes
    (:func:`_pickled`: a dict or an array changed in place is another value).  A
    template ships its tasks once (:class:`.calls.ShippedParts`), so ``SCALE = k`` before each step
    of a loop whose kernel reads ``SCALE`` gave the value it was shipped with, where a local
    scheduler calls the function itself; now such a step is another program.  On a local scheduler
    nothing: the function itself runs, reading its globals as they are."""
    if not _on_a_cluster():  # (a local scheduler calls the function itself: it reads the globals as they are)
        return ()
    names = _global_names.get(fn.__code__)
    if names is None:
        found, codes = set(), [fn.__code__]
        while codes:
            code = codes.pop()
            found.update(code.co_names)
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        names = _global_names[fn.__code__] = tuple(sorted(found))
    busy = _sending.busy
    if id(fn) in busy:
        return ()
    busy.add(id(fn))
    try:
        out, g = [], fn.__globals__
        for name in names:
            x = g.get(name, _Same)
            if x is _Same or isinstance(x, types.ModuleType):
                continue
            if type(x) in _PLAIN or type(x) is types.FunctionType and x.__module__ == "__main__":
                out.append((name, frozen(x)))
            else:
                out.append((name, _pickled(x)))
        return tuple(out)
    finally:
        busy.discard(id(fn))


def _on_a_cluster():
    """Whether this thread's submissions go to a distributed client (``submit.current_client``'s test)."""
    if clientless() or local_scheduler_asked():
        return False
    from distributed import get_client

    try:
        get_client()
    except ValueError:
        return False
    return True


def _pickled(x):
    """A global sent with a function of ``__main__`` by what cloudpickle sends: a digest of its bytes
    (a dict, an array, a list changed in place between steps, a class of ``__main__`` whose
    attribute changed: each state its own program); by its identity where it does not pickle."""
    try:
        if type(x) is np.ndarray and x.dtype.kind != "O":  # (by its bytes, hashed: not copied into a pickle)
            return ("array", tokenize(x), x.strides)  # (strides too: see frozen)
        return ("pickled", hashlib.blake2b(cloudpickle.dumps(x), digest_size=16).digest())
    except Exception:  # (the submission itself would say why it cannot be sent)
        return _Same(x)


# functions, types and NumPy's ufuncs and dispatchers are themselves in a key (and held by it, so
# that their identity is not reused)
_ITSELF = (types.FunctionType, types.BuiltinFunctionType, type, np.ufunc, type(np.transpose))


def _dtype(dtype):
    """A dtype by its byte layout, and its repr where that is not all of it (``.str`` is ``|V16`` for
    every 16-byte record type, whatever its fields)."""
    if dtype.kind in "biufcmMSU" and dtype.metadata is None:
        return (np.dtype, dtype.str)
    return (np.dtype, dtype.str, repr(dtype))


_avals = {}  # (fn, params, kinds of srcs) -> (dtype, meta, chunks), or None where it must run on the values
_AVALS_MAX = 65536
_lock = threading.RLock()


def _kind(s):
    if isinstance(s, (Lazy, da.Array)):
        return ("array", s.chunks, s.dtype, type(s._meta), s._meta.ndim)
    t = type(s)
    if t is Constant:  # (its value is in memory, not in the abstract value)
        return (t, s.v.dtype.str)
    if t is float:
        return (t, s.hex())
    if t is complex:
        return (t, s.real.hex(), s.imag.hex())
    return (t, s)  # ints and strings by value (NumPy's dtype rules read an int's value); others hashed


def _frozen_once(params):
    """``frozen(params)`` made when an op is recorded, for its abstract value's cache and, where
    nothing in it can change in place before the program is submitted, for the program's key too (else
    None: a NumPy array, list or dict, a closure's cells or a function's globals are frozen again
    at each submission, as they are then)."""
    try:
        fparams, fixed = frozen_fixed(params)
    except NoKey:
        return None
    return fparams if fixed else None


def frozen_fixed(params, held=False):
    """``(frozen(params), whether nothing in it can change in place)`` (see :func:`_frozen_once`;
    ``held``: :func:`frozen_held`'s form)."""
    if not params:
        return (), True
    before = _freezing.changeable
    fparams = frozen_held(params) if held else frozen(params)
    return fparams, _freezing.changeable == before


def _aval(fn, srcs, params, fparams):
    """The result's dtype, meta and chunks, from ``fn`` run once on stand-ins of ``srcs`` (remembered
    per ``fn``, ``params`` (``fparams``: frozen, or None) and operand kinds); None where the result's
    chunks are unknown."""
    try:
        key = (fn, frozen(params) if fparams is None else fparams, tuple(_kind(s) for s in srcs))
        hash(key)
    except (TypeError, NoKey):  # an unhashable constant: inferred every time
        key = None
    if key is not None:
        hit = _avals.get(key, _avals)
        if hit is not _avals:
            return hit
    try:
        out = fn(*[stand_in(s, f"stand-in-{i}") if isinstance(s, (Lazy, da.Array)) else s.v if type(s) is Constant
                   else s for i, s in enumerate(srcs)], **dict(params))
    except Exception:  # noqa: BLE001 - the forward on the real arrays raises its own error, or works
        out = fn(*[value_of(s) for s in srcs], **dict(params))
        return None if not isinstance(out, da.Array) else _known(out)
    aval = _known(out) if isinstance(out, da.Array) else None
    if key is not None and len(_avals) < _AVALS_MAX:
        _avals[key] = aval
    return aval


def _known(a):
    if any(n != n for c in a.chunks for n in c):
        return None
    return a.dtype, a._meta, a.chunks


class _Stub(MaterializedLayer):
    """The layer of a stand-in: an array known by its name, chunks and meta, with no tasks here."""

    def __init__(self):
        super().__init__({})


def stand_in(a, name):
    """An array with ``a``'s chunks and meta named ``name``, whose graph is one empty layer (made by
    :func:`.internals.array`: ``a``'s chunks and meta are normalized already, and a lowering makes
    one stand-in per operand of every op)."""
    return array(HighLevelGraph({name: _Stub()}, {name: set()}), name, a.chunks, a._meta)


def is_stub(layer):
    return type(layer) is _Stub


# ------------------------------------------------------------------ lowering
def lower(order, slot_name=None, wanted=()):
    """The layers of the Lazy nodes ``order`` (each after the nodes of ``order`` it reads), with the
    name of each node's array: ``(layers, deps, names, slots)``.  A node's forward runs on stand-ins
    named as its operands' arrays, so it makes only its own layers; ``slots`` are the dask arrays
    read (computed or built values of nodes not in ``order``, arrays), by name, whose graphs the caller
    joins.  ``slot_name(array)``: the name a slot is read under (a template names them itself).

    A chain of elementwise ops whose intermediate values nothing else reads (``wanted``: the nodes
    asked for) is one layer, one function a chunk (:class:`Fused`): a 100,000-op chain makes a few
    thousand layers, not 100,000."""
    layers, deps, names, slots = {}, {}, {}, {}
    inner = _fusable_chains(order, {id(n) for n in wanted})
    for node in order:
        if node.fn is _component:  # the group's i-th array
            names[id(node)] = names[id(node.srcs[0])][node.params[0][1]]
            continue
        if id(node) in inner:
            continue  # (computed inside the fused function of the chain it ends in)
        chain = inner.get(("root", id(node)))
        if chain is not None:
            name, layer, layer_deps = _fused_layer(node, chain, names, slots, slot_name)
            layers[name], deps[name], names[id(node)] = layer, layer_deps, name
            if node.rule is not None:
                made_by([name], node.rule)
            if node.label is not None:
                _relabelled(node, layers, deps, names)
            continue
        args = []
        for s in map(through, node.srcs):
            if type(s) is Lazy and id(s) in names:
                args.append(stand_in(s, names[id(s)]))
            elif isinstance(s, (Lazy, da.Array, Constant)):
                a = value_of(s)  # (a computed or built value, or a constant: read as a slot)
                name = a.name if slot_name is None else slot_name(a)
                slots.setdefault(name, a)
                args.append(stand_in(a, name))
            else:
                args.append(s)
        with dask.annotate(**node.annotations) if node.annotations else _nothing:
            if node.elementwise:
                out = elementwise_layer(node.fn, args, node.dtype, node._meta, node.chunks)
            else:
                out = node.fn(*args, **dict(node.params))
        made = []
        for o in (out if node.many else (out,)):
            for name, layer in o.dask.layers.items():
                if not is_stub(layer) and name not in layers:
                    layers[name], deps[name] = layer, set(o.dask.dependencies.get(name, ()))
                    made.append(name)
                    if type(layer) is MaterializedLayer:  # dask's pad and setitem inline their operands'
                        deps[name] |= _layers_read(layer)  # graphs into one layer: of a stand-in, only the keys
        if node.rule is not None and made:
            made_by(made, node.rule)
        names[id(node)] = tuple(o.name for o in out) if node.many else out.name
        if node.label is not None:
            _relabelled(node, layers, deps, names)
    return layers, deps, names, slots


def labelled(v, label):
    """``v`` (a VJP rule's output, recorded by it) ending in a layer named ``<label>-<token>`` when
    lowered: the dashboard shows which rule ran.  The layer :func:`.layers.relabel` makes, added by
    lowering, so a backward records no op for it (a rule's outputs were a third of a small program's
    values).  False where ``v`` cannot carry it (not a value this rule made alone, made or named
    already): the caller records the relabel as an op of its own."""
    if (type(v) is not Lazy or v.rule != label or v.label is not None or v.computed is not None
            or v._built is not None or v.many or v.fn is _component or v.fn is _alias or v.fn is _held):
        return False
    v.label = label
    return True


def _relabelled(node, layers, deps, names):
    """The relabel layer of a labelled ``node`` (see :func:`labelled`) added; its name is the node's."""
    with dask.annotate(**node.annotations) if node.annotations else _nothing:
        out = relabel(stand_in(node, names[id(node)]), node.label)
    layers[out.name], deps[out.name] = out.dask.layers[out.name], {names[id(node)]}
    if node.rule is not None:
        made_by([out.name], node.rule)
    names[id(node)] = out.name


_CHAIN = 128  # elementwise ops fused into one function at most (a chain longer is several)


def _fusable(node):
    # (a 0-d operand's chunk may be a NumPy scalar, which would change the result's dtype; a lifted
    # number is one of the result's dtype)
    return (node.elementwise and node.ndim > 0 and not node.annotations
            and not any(isinstance(s, (Lazy, da.Array)) and s.ndim == 0 for s in map(through, node.srcs)))


def _fusable_chains(order, wanted):
    """The chains of elementwise ops to fuse: ``{("root", id): [nodes, each after what it reads]}``
    for the last op of each, and the ids of the ops inside one (read once, by the chain)."""
    reads = {}
    for node in order:
        for s in map(through, node.srcs):
            if type(s) is Lazy:
                reads[id(s)] = reads.get(id(s), 0) + 1
    position = {id(n): i for i, n in enumerate(order)}  # (also: which ops are in this program)
    out = {}
    for root in reversed(order):
        if id(root) in out or not _fusable(root):
            continue
        members, stack = [], [root]
        while stack and len(members) < _CHAIN:
            node = stack.pop()
            members.append(node)
            for s in map(through, node.srcs):
                if (type(s) is Lazy and id(s) in position and id(s) not in out and id(s) not in wanted
                        and reads.get(id(s)) == 1 and s.computed is None and _fusable(s) and _aligned(s, root)
                        and s.rule == root.rule and s.label is None):  # (the dashboard names a fused layer by
                    # its rule; a labelled value ends in a layer of its own)
                    out[id(s)] = True
                    stack.append(s)
        if len(members) > 1:
            out[("root", id(root))] = sorted(members, key=lambda n: position[id(n)])
        for node in stack:  # (beyond the cap: computed as chains of their own)
            out.pop(id(node), None)
    return out


def _aligned(node, root):
    """Whether ``node``'s blocks line up with ``root``'s (trailing axes the same chunks, or one element)."""
    for j, c in enumerate(node.chunks):
        d = root.ndim - node.ndim + j
        if d < 0 or (c != root.chunks[d] and c != (1,)):
            return False
    return True


class Fused:
    """A chain of elementwise ops as one function of its inputs' blocks: ``steps`` ``(fn, refs)`` run in
    order, a ref ``(0, j)`` input block ``j``, ``(1, k)`` step ``k``'s result, ``(2, v)`` the number
    ``v``; each result dropped after its last reader (``drops``)."""

    __slots__ = ("steps", "drops", "_kernel", "_run")
    row_rule = "elementwise"  # (a chain of elementwise ops is one: :mod:`.rows` may run it over row blocks)

    def __init__(self, steps):
        self.steps = tuple(steps)
        last = {}
        for i, (_, refs) in enumerate(self.steps):
            for kind, v in refs:
                if kind == 1:
                    last[v] = i
        self.drops = tuple(tuple(k for k, i2 in last.items() if i2 == i) for i in range(len(self.steps)))
        self._kernel = False  # not looked for yet (None: there is none, see kernels.Kernel.of)
        self._run = None  # the steps as one generated function (made on the first call)

    def __call__(self, *blocks):
        if self._kernel is False:
            self._kernel = kernels.Kernel.of(self.steps)
        if self._kernel is not None:  # one pass over a large chunk (the same bits): kernels
            out = self._kernel(blocks)
            if out is not None:
                return out
        run = self._run
        if run is None:
            run = self._run = _chain_function(self.steps, self.drops) if self.steps else self.run_steps
        return run(blocks)

    def run_steps(self, blocks):
        """The steps run one by one, as the generated function runs them."""
        results = [None] * len(self.steps)
        for i, (fn, refs) in enumerate(self.steps):
            results[i] = fn(*[blocks[v] if kind == 0 else results[v] if kind == 1 else v for kind, v in refs])
            for k in self.drops[i]:
                results[k] = None
        return results[-1]

    def __dask_tokenize__(self):
        return ("daskgrad-fused", tuple((funcname(fn), tokenize(fn), tuple((kind, exact(v)) for kind, v in refs))
                                        for fn, refs in self.steps))  # (a number by its bits: see layers.exact)

    def __reduce__(self):
        return Fused, (self.steps,)


def _chain_function(steps, drops):
    """``steps`` (:class:`Fused`'s) as one Python function of the blocks: each step called on local
    variables, each result deleted after its last reader, the same calls in the same order as
    :meth:`Fused.run_steps` (on a small chunk, looking the operands up step by step cost as much as the
    arithmetic: a time loop's step runs a chain on every chunk)."""
    env, lines = {}, []

    def const(value):
        name = f"c{len(env)}"
        env[name] = value
        return name

    for i, (fn, refs) in enumerate(steps):
        args = [f"blocks[{v}]" if kind == 0 else f"r{v}" if kind == 1 else const(v) for kind, v in refs]
        lines.append(f"r{i} = {const(fn)}({', '.join(args)})")
        if drops[i]:
            lines.append(f"del {', '.join(f'r{k}' for k in drops[i])}")
    source = "def run(blocks):\n" + "".join(f"    {line}\n" for line in lines) + f"    return r{len(steps) - 1}\n"
    generated(source, "<daskgrad elementwise chain>", env)
    return env["run"]


def _fused_layer(root, chain, names, slots, slot_name):
    """One blockwise layer computing the elementwise ``chain`` that ends in ``root``."""
    position = {id(n): i for i, n in enumerate(chain)}
    inputs, arg_of, steps = [], {}, []
    for node in chain:
        refs = []
        for s in map(through, node.srcs):
            if type(s) is Lazy and id(s) in position:
                refs.append((1, position[id(s)]))
            elif isinstance(s, (Lazy, da.Array, Constant)):
                if type(s) is Lazy and id(s) in names:
                    name, a = names[id(s)], s
                else:
                    a = value_of(s)
                    name = a.name if slot_name is None else slot_name(a)
                    slots.setdefault(name, a)
                if name not in arg_of:
                    arg_of[name] = len(inputs)
                    inputs.append((name, a.ndim, a.numblocks))
                refs.append((0, arg_of[name]))
            else:
                refs.append((2, s))
        steps.append((getattr(node.fn, "_ufunc", node.fn), tuple(refs)))
    fn = Fused(steps)
    name = f"{funcname(steps[-1][0])}-{tokenize(fn, [n for n, _, _ in inputs], root.dtype)}"
    ind = tuple(range(root.ndim))[::-1]
    pairs = [x for n, nd, _ in inputs for x in (n, ind[len(ind) - nd:])]
    layer = blockwise(fn, name, ind, *pairs, numblocks={n: nb for n, _, nb in inputs})
    return name, layer, {n for n, _, _ in inputs}


def _layers_read(layer):
    """Names of the layers whose keys the tasks of ``layer`` read."""
    return {k[0] if isinstance(k, tuple) else k for v in layer.mapping.values() if isinstance(v, GraphNode)
            for k in v.dependencies}


_nothing = contextlib.nullcontext()


def _postorder(outputs):
    """The Lazy nodes ``outputs`` read that are neither computed nor built, each after all it reads
    (iteratively: a recorded chain is as deep as the loop that made it)."""
    order, done = [], set()
    stack = [o for o in map(through, outputs) if type(o) is Lazy and o.computed is None and o._built is None]
    while stack:
        node = stack[-1]
        if id(node) in done:
            stack.pop()
            continue
        waiting = [s for s in map(through, node.srcs) if type(s) is Lazy and s.computed is None and s._built is None
                   and id(s) not in done]
        if waiting:
            stack.extend(reversed(waiting))
        else:
            stack.pop()
            done.add(id(node))
            order.append(node)
    return order


_building = threading.RLock()
_alias_hook = []  # told when a value read through an alias is built on its own (daskgrad.compile's traces)


def on_alias_built(hook):
    """``hook()`` is called whenever a value read through an alias is built as a dask array on its own
    (``tensor.array`` inside a recording): the array holds the values the aliases point at now, which a
    program recorded for other values would silently keep."""
    _alias_hook[:] = [hook]


def build(nodes):
    """Build ``nodes`` (Lazy values) as dask arrays with the real names, each node's array held in
    its ``_built``: one join of every layer and of the slots' graphs."""
    with _building:  # (another thread may be building the same chain)
        todo = [n for n in nodes if n.computed is None and n._built is None]
        if not todo:
            return
        order = _postorder(todo)
        if _alias_hook and any(type(s) is Lazy and s.fn is _alias for n in order for s in n.srcs):
            _alias_hook[0]()
        layers, deps, names, slots = lower(order, wanted=todo)
        for a in slots.values():
            for name, layer, layer_deps in _layers_of(a):
                if name not in layers or is_stub(layers[name]):
                    layers[name], deps[name] = layer, layer_deps
        deps = {n: d & layers.keys() for n, d in deps.items() if n in layers}
        needed, stack = set(), [names[id(n)] for n in todo if not n.many]
        stack += [m for n in todo if n.many for m in names[id(n)]]
        while stack:  # only the layers the arrays read (a slot an op was given for its shape is not)
            name = stack.pop()
            if name not in needed and name in layers:
                needed.add(name)
                stack.extend(deps.get(name, ()))
        hlg = HighLevelGraph({n: layers[n] for n in needed}, {n: deps.get(n, set()) & needed for n in needed})
        for n in todo:
            n._built = fold(da.Array(hlg, names[id(n)], n.chunks, meta=n._meta))


def _layers_of(a):
    yield from flat_layers(a.dask)
