"""Custom differentiable ops: ``Function`` (torch's ``autograd.Function``) and
``map_blocks`` (a user's chunk kernel with a chunk-level VJP)."""
from __future__ import annotations

import functools
import inspect
import warnings

import dask.array as da
import numpy as np
from dask.base import tokenize

from . import _dask as door
from .graph import RESULT, node_class, primitive, save_tensors
from ._modes import is_grad_enabled, no_grad
from ._tensor import Tensor, _Handle, recorded
from .ops import concatenate, zeros_like


class FunctionCtx:
    """The ``ctx`` of a custom Function: ``save_for_backward``, ``saved_tensors``, ``needs_input_grad``,
    ``mark_non_differentiable``, ``mark_dirty``, ``set_materialize_grads``."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self._to_save, self._saved, self._non_differentiable, self._dirty = (), None, set(), set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} is of type "
                                f"{type(t).__name__}")
        self._to_save = tensors

    @property
    def saved_tensors(self):
        return tuple(getattr(self._saved, f"t{i}") for i in range(self._n_saved))

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        """Inputs that ``forward`` modified in place; the one returned becomes the output."""
        self._dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        """With False, ``backward`` gets ``None`` instead of zeros for an output that received no
        gradient (an unused output of a Function with several outputs; a single output always
        has one, since backward runs only when it received a cotangent)."""
        self.materialize_grads = bool(value)


class Function:
    """Subclass with static ``forward(ctx, *args)`` and ``backward(ctx, grad)``; call ``.apply``.

    ``forward`` runs on lazy tensors with recording off; ``backward`` returns one
    gradient per forward input (``None`` for non-tensors).
    """

    def __init__(self, *args, **kwargs):
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd functions are all static, "
                      "so you should invoke them on the class itself. Instantiating an autograd function will "
                      "raise an error in a future version of PyTorch.", DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is deprecated. Please use "
                           "new-style autograd function with static forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        """torch 2's style: ``forward(*args)`` takes no ctx, and this fills it from the inputs and output."""
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        if cls.setup_context is not Function.setup_context:  # forward(*args) takes no ctx
            # torch binds forward's defaults first: setup_context sees every input, defaults included
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, {}
        elif kwargs:
            args = inspect.signature(cls.forward).bind(None, *args, **kwargs).args[1:]
        ctx = FunctionCtx(tuple(isinstance(a, Tensor) and a.requires_grad for a in args))
        with no_grad():
            if cls.setup_context is not Function.setup_context:
                out = cls.forward(*args)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args)
        if isinstance(out, tuple):
            return _apply_many(cls, ctx, args, out)
        if not isinstance(out, Tensor):
            return out  # torch hands back what forward returned: nothing to differentiate
        if id(out) in ctx._non_differentiable:
            return out
        _check_dirty(ctx, out)
        to_save, ctx._to_save = ctx._to_save, ()
        ctx._n_saved = len(to_save)
        # the output saved by forward must come back as the recorded output (with this node as
        # its grad_fn), or a second derivative through it would see a constant
        res = function_p.record(out._storage.value, *_tensor_args(args),
                                save={f"t{i}": RESULT if t is out else t for i, t in enumerate(to_save)},
                                node=f"{cls.__name__}Backward", cls=cls, ctx=ctx, is_tensor=_is_tensor(args))
        return _rebase_dirty(ctx, out, res)


def once_differentiable(backward):
    """torch's decorator for a ``backward`` that is not differentiable itself: it runs with grad mode
    off, and when a higher order gradient is asked for (an incoming gradient requires grad), its
    results hang off a node that raises if differentiated."""
    @functools.wraps(backward)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = backward(ctx, *args)
        if not is_grad_enabled() or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        if not isinstance(outputs, tuple):
            return _DelayedError.apply(_fake_requires_grad(outputs))
        return tuple(_DelayedError.apply(_fake_requires_grad(o)) for o in outputs)
    return wrapper


def _fake_requires_grad(t):
    if isinstance(t, Tensor) and (np.issubdtype(t.dtype, np.floating) or np.issubdtype(t.dtype, np.complexfloating)):
        return t.detach().requires_grad_(True)
    return t


class _DelayedError(Function):
    """The identity, whose backward raises torch's error: the gradient of a once_differentiable backward."""

    @staticmethod
    def forward(ctx, t):
        return t

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


# A user's Function: its node is named <Class>Backward; the params hold the class and its ctx, and
# the inputs' tensors live only in the saved values (``save_for_backward``), as in torch.
function_p = primitive("function")


@function_p.vjp
def _function_rule(g, s, *, cls, ctx, is_tensor):
    ctx._saved = s
    return _input_grads(cls.backward(ctx, g), is_tensor, f"{cls.__name__}Backward")


def _tensor_args(args):
    return tuple(a if isinstance(a, Tensor) else None for a in args)


def _is_tensor(args):
    return tuple(isinstance(a, Tensor) for a in args)


def _check_dirty(ctx, out):
    if id(out) in ctx._dirty and is_grad_enabled() and out.grad_fn is None and out.requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


def _rebase_dirty(ctx, out, res):
    """torch returns a modified (dirty) input itself, now an output of the Function's node."""
    if id(out) in ctx._dirty and res.grad_fn is not None:
        if out._base is not None:  # a view: its base's history becomes torch's CopySlices of the node
            return out._write_view(res, bump=False)
        out._storage.array = res.array
        out.grad_fn, out._requires_grad = res.grad_fn, True
        return out
    return res


def _input_grads(grads, is_tensor, name):
    """One gradient per forward input, as torch validates what ``backward`` returned."""
    grads = grads if isinstance(grads, tuple) else (grads,)
    if len(grads) > len(is_tensor) and all(gr is None for gr in grads[len(is_tensor):]):
        grads = grads[:len(is_tensor)]  # torch drops extra gradients when they are all None
    if len(grads) != len(is_tensor):
        raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                           f"(expected {len(is_tensor)}, got {len(grads)})")
    for i, (gr, t) in enumerate(zip(grads, is_tensor)):
        if gr is not None and not t:
            raise RuntimeError(f"function {name} returned a gradient different than None at position "
                               f"{i + 1}, but the corresponding forward input was not a Variable")
    return grads


def _apply_many(cls, ctx, args, outs):
    """A Function with several outputs.  The engine's nodes have one output each, so the
    differentiable outputs are packed into one flat tensor recorded with ``backward``'s rule;
    each output is a slice of it whose VJP notes that this output received a gradient, so
    ``backward`` gets ``None`` (``set_materialize_grads(False)``) or zeros for the others."""
    name = f"{cls.__name__}Backward"
    diff, first = [], {}
    for i, o in enumerate(outs):
        if (isinstance(o, Tensor) and id(o) not in ctx._non_differentiable and np.issubdtype(o.dtype, np.floating)
                and id(o) not in first):
            first[id(o)] = i
            diff.append(i)
        if isinstance(o, Tensor):
            _check_dirty(ctx, o)
    inputs = _tensor_args(args)
    if not diff or not is_grad_enabled() or not any(a is not None and a.requires_grad for a in inputs):
        return outs
    dtypes = {outs[i].dtype for i in diff}
    if len(dtypes) > 1 and any(d.kind == "c" for d in dtypes):
        raise NotImplementedError(
            f"{cls.__name__}: differentiable outputs of different dtypes {sorted(map(str, dtypes))}")
    common = np.result_type(*dtypes)  # real outputs of several precisions pack in the widest, exactly
    sizes = [outs[i].numel() for i in diff]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    with no_grad():
        parts = [outs[i].reshape(-1) if outs[i].dtype == common else outs[i].reshape(-1).astype(common)
                 for i in diff]
        flat = concatenate(parts) if len(parts) > 1 else parts[0]
    used = set()  # which outputs received a cotangent in this backward (filled by the pieces' rules)
    to_save, ctx._to_save = ctx._to_save, ()
    ctx._n_saved = len(to_save)
    offsets = tuple(int(o) for o in offsets)
    # zeros for the outputs that get no cotangent: lazy constants, made now so the node holds no output
    zeros = tuple(zeros_like(o).array if isinstance(o, Tensor) else None for o in outs)
    packed = function_many_p.record(flat.array, *inputs, node=name, cls=cls, ctx=ctx, is_tensor=_is_tensor(args),
                                    used=used, diff=tuple(diff), offsets=offsets,
                                    shapes=tuple(getattr(o, "shape", None) for o in outs), zeros=zeros,
                                    dtypes=tuple(getattr(o, "dtype", None) for o in outs))
    packed_zeros = zeros_like(packed).array  # on the packed tensor's chunks and device

    def piece(k, i):
        lo, hi, shape = offsets[k], offsets[k + 1], outs[i].shape
        arr = packed.array[lo:hi].reshape(shape)
        arr = arr if arr.dtype == outs[i].dtype else arr.astype(outs[i].dtype)
        arr = arr.rechunk(outs[i].chunks) if arr.shape == outs[i].shape and not any(
            n != n for n in arr.shape) else arr
        out = function_output_p.record(arr, packed, node=name, i=i, lo=lo, hi=hi, total=offsets[-1], used=used,
                                       zeros=packed_zeros)
        if out.grad_fn is not None:
            out.grad_fn.__class__ = _output_node_class(name)
        return _rebase_dirty(ctx, outs[i], out)

    made = {i: piece(k, i) for k, i in enumerate(diff)}
    result = tuple(made[first[id(o)]] if isinstance(o, Tensor) and id(o) in first else o for o in outs)
    saved = {}
    for j, t in enumerate(to_save):
        saved[f"t{j}"] = made[first[id(t)]] if isinstance(t, Tensor) and id(t) in first else t
    if saved:
        save_tensors(packed.grad_fn, saved)
    return result


_output_node_classes = {}


def _output_node_class(name):
    """The class of an output's node of a Function with several outputs: torch's name, and prehooks
    that go to the Function's one node, seeing (and returning) every output's gradient."""
    cls = _output_node_classes.get(name)
    if cls is None:
        cls = _output_node_classes[name] = type(name, (node_class(name),), {
            "__slots__": (), "register_prehook": _register_function_prehook})
    return cls


def _register_function_prehook(self, fn):
    packed = self.next_functions[0][0]
    p = packed._params

    def hook(grad_outputs):
        (g,) = grad_outputs
        gs = tuple(_output_grad(g, p, i) if i in p["diff"] else None for i in range(len(p["shapes"])))
        r = fn(gs)
        if r is None:
            return None
        parts = [(r[i] if r[i] is not None else _output_grad(g, p, i) * 0).reshape(-1).astype(g.dtype)
                 for i in p["diff"]]
        return (concatenate(parts) if len(parts) > 1 else parts[0],)

    return _Handle(packed._prehooks, hook)


def _output_grad(g, p, i):
    k = p["diff"].index(i)
    gi = g[p["offsets"][k]:p["offsets"][k + 1]].reshape(p["shapes"][i])
    return gi if gi.dtype == p["dtypes"][i] else gi.astype(p["dtypes"][i])


# A Function with several outputs: one node packs the differentiable outputs into one flat tensor
# (its rule unpacks the cotangent and calls ``backward``); each output is a slice of it.
function_many_p = primitive("function_many")
function_output_p = primitive("function_output")


@function_many_p.vjp
def _function_many_rule(g, s, *, cls, ctx, is_tensor, used, diff, offsets, shapes, zeros, dtypes):
    got, _ = set(used), used.clear()
    grads = []
    for i, (shape, z) in enumerate(zip(shapes, zeros)):
        if i in diff and i in got:
            k = diff.index(i)
            gi = g[offsets[k]:offsets[k + 1]].reshape(shape)
            grads.append(gi if gi.dtype == dtypes[i] else gi.astype(dtypes[i]))
        elif z is not None and ctx.materialize_grads:
            grads.append(Tensor._make(z))
        else:
            grads.append(None)
    ctx._saved = s
    return _input_grads(cls.backward(ctx, *grads), is_tensor, f"{cls.__name__}Backward")


@function_output_p.vjp
def _function_output_rule(g, s, *, i, lo, hi, total, used, zeros):
    used.add(i)
    z = Tensor._make(zeros)
    parts = ([z[:lo]] if lo else []) + [g.reshape(-1)] + ([z[hi:]] if hi < total else [])
    return (concatenate(parts) if len(parts) > 1 else parts[0],)


def _vjp_mismatch(label, i, got, want):
    return (f"map_blocks vjp of {label} returned a block of shape {tuple(got.shape)} and dtype {got.dtype} "
            f"for input {i}, whose block has shape {tuple(want.shape)} and dtype {want.dtype}; a vjp "
            "must return one cotangent block per input, each with that input block's shape and dtype")


def _vjp_results(vjp, label, g, blocks, kwargs):
    """The user's cotangent blocks, refused unless one per input with each input block's shape and dtype."""
    outs = vjp(g, *blocks, **kwargs)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(blocks):
        raise RuntimeError(f"map_blocks vjp of {label} returned {len(outs)} cotangent blocks for "
                           f"{len(blocks)} inputs")
    for i, (o, b) in enumerate(zip(outs, blocks)):
        if getattr(o, "shape", None) != b.shape or getattr(o, "dtype", None) != b.dtype:
            if not hasattr(o, "shape"):
                raise TypeError(f"map_blocks vjp of {label} returned a {type(o).__name__} for input {i}, "
                                "not an array block")
            raise RuntimeError(_vjp_mismatch(label, i, o, b))
    return outs


def _vjp_all(vjp, label, kwargs):
    def call(g, *blocks):
        out = np.empty((1,) * g.ndim, dtype=object)
        out.reshape(-1)[0] = _vjp_results(vjp, label, g, blocks, kwargs)
        return out
    return call


def _check_on_meta(vjp, label, g, ins, kwargs):
    """Run the vjp on the empty meta blocks, so a wrong count, rank or dtype fails on the client
    before anything is submitted.  A vjp that cannot run on empty blocks is left to the
    per-block check."""
    try:
        metas = tuple(a._meta.reshape((0,) * a.ndim) for a in ins)
        outs = vjp(g._meta.reshape((0,) * g.ndim), *metas, **kwargs)
    except Exception:
        return
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(ins):
        raise RuntimeError(f"map_blocks vjp of {label} returned {len(outs)} cotangent blocks for "
                           f"{len(ins)} inputs")
    for i, (o, a, m) in enumerate(zip(outs, ins, metas)):
        if not hasattr(o, "dtype") or o.ndim != a.ndim or o.dtype != a.dtype:
            if not hasattr(o, "dtype"):
                raise TypeError(f"map_blocks vjp of {label} returned a {type(o).__name__} for input {i}, "
                                "not an array block")
            raise RuntimeError(_vjp_mismatch(label, i, o, m))


def _pick(i):
    def pick(cell):
        return cell.reshape(-1)[0][i]
    return pick


def map_blocks(chunk_fn, *tensors, vjp=None, dtype=None, name=None, **kwargs):
    """Apply an elementwise-aligned chunk kernel to tensors that share chunks, as dask's ``map_blocks``.

    ``chunk_fn(*blocks, **kwargs)`` runs on each chunk (NumPy or cupy blocks) and returns a block of
    the same shape.  ``vjp(g_block, *input_blocks, **kwargs)`` returns one cotangent block per
    input: backward runs it once per chunk, in a layer named ``<name>-vjp``.  Without ``vjp`` the
    result does not require grad, so an input that requires grad (under grad mode) raises, rather
    than silently dropping its gradient.

    Parameters
    ----------
    chunk_fn : callable
        The chunk kernel.
    *tensors : Tensor or array
        Its inputs, with the same chunks.
    vjp : callable, optional
        The chunk-level vector-Jacobian product.
    dtype : dtype, optional
        The result's dtype (default: the first input's).
    name : str, optional
        The layer's name (default: ``chunk_fn``'s name); the node is ``<name>Backward``.
    **kwargs
        Passed to ``chunk_fn`` and ``vjp`` (and dask's ``map_blocks`` options).

    Returns
    -------
    Tensor
    """
    ts = [t if isinstance(t, Tensor) else Tensor._make(t) for t in tensors]
    if vjp is None and is_grad_enabled():
        needs = [i for i, t in enumerate(ts) if t.requires_grad]
        if needs:  # the result would silently leave the graph: no gradient would reach these inputs
            raise RuntimeError(
                f"map_blocks: input {needs[0]} requires grad, but no vjp= was given, so no gradient could "
                f"flow through {getattr(chunk_fn, '__name__', 'the kernel')}: pass vjp=(g, *blocks) -> one "
                f"cotangent block per input, or call it on .detach() (or under no_grad()) for values alone")
    label = name or getattr(chunk_fn, "__name__", "map_blocks")
    dtype = np.dtype(dtype) if dtype is not None else ts[0].dtype
    out = door.defer(_map_blocks_array, [recorded(t) for t in ts],
                     (("fn", chunk_fn), ("dtype", dtype), ("label", label), ("kwargs", tuple(kwargs.items()))))
    if vjp is None:
        return Tensor._make(out)
    return map_blocks_p.record(out, *ts, save={f"t{i}": t for i, t in enumerate(ts)}, node=f"{label}Backward",
                               vjp=vjp, label=label, kwargs=kwargs, n=len(ts))


def _map_blocks_array(*arrays, fn, dtype, label, kwargs):
    kwargs = dict(kwargs)
    return da.map_blocks(fn, *arrays, dtype=dtype, meta=arrays[0]._meta.astype(dtype),
                         name=f"{label}-{tokenize(fn, *arrays, kwargs, _strides(kwargs))}", **kwargs)


def _strides(v):
    """The strides of the NumPy arrays in ``v`` (a dict, list or tuple of them): dask's token of an array
    is of its bytes in memory order and its shape, so a square array and its transpose have one token."""
    if isinstance(v, np.ndarray):
        return v.strides
    if isinstance(v, dict):
        return [_strides(o) for o in v.values()]
    if isinstance(v, (list, tuple)):
        return [_strides(o) for o in v]
    return None


# A user's chunk kernel: its node is named <name>Backward; the params hold the chunk-level vjp.
map_blocks_p = primitive("map_blocks")


@map_blocks_p.vjp
def _map_blocks_rule(g, s, *, vjp, label, kwargs, n):
    ins = [recorded(getattr(s, f"t{i}")) for i in range(n)]
    _check_on_meta(vjp, label, recorded(g), ins, kwargs)
    cells = door.defer(_vjp_cells, [recorded(g)] + ins, (("vjp", vjp), ("label", label),
                                                          ("kwargs", tuple(kwargs.items()))))
    return tuple(Tensor._make(door.defer(_picked, (cells, a), (("i", i),))) for i, a in enumerate(ins))


def _vjp_cells(g, *ins, vjp, label, kwargs):
    """One object block per chunk holding the user's cotangent blocks of every input."""
    kwargs = dict(kwargs)
    token = tokenize(vjp, g, *ins, kwargs, _strides(kwargs))
    return da.map_blocks(_vjp_all(vjp, label, kwargs), g, *ins, dtype=object,
                         meta=np.empty((0,) * g.ndim, dtype=object), name=f"{label}-vjp-{token}")


def _picked(cells, like, *, i):
    """Input ``i``'s cotangent blocks out of ``cells`` (``like``: that input, for its dtype and meta)."""
    return da.map_blocks(_pick(i), cells, dtype=like.dtype, meta=like._meta,
                         name=f"{cells.name.replace('-vjp-', '-vjp-pick{}-'.format(i), 1)}")


# --------------------------------------------------------------------------- the dask.array surface
def _tensor_map_blocks(self, func, *args, vjp=None, dtype=None, name=None, **kwargs):
    """``t.map_blocks(func, *others, vjp=None, dtype=None, name=None, **kwargs)``: dask.array's method,
    differentiable: :func:`daskgrad.map_blocks` with this tensor as the first input.  ``func`` runs on
    each chunk; ``vjp(g, *blocks)`` gives one cotangent block per input.  On a tensor that requires
    grad, ``vjp`` is needed (else ``RuntimeError`` saying so; ``t.detach().map_blocks(func)`` gives values
    alone)."""
    return map_blocks(func, self, *args, vjp=vjp, dtype=dtype, name=name, **kwargs)


_tensor_map_blocks.__name__, _tensor_map_blocks.__qualname__ = "map_blocks", "Tensor.map_blocks"


class _BlockIndexer:
    """``t.blocks[i, j]``: the tensor of the selected chunks, as dask.array's ``Array.blocks``: the axes
    stay (an int selects one chunk), slices and lists of block indices select several.  It is
    differentiable: a run of consecutive blocks is a slice of the tensor, other selections join slices."""

    def __init__(self, tensor):
        self._t = tensor

    def __getitem__(self, index):
        t = self._t
        if not isinstance(index, tuple):
            index = (index,)
        if any(i is None for i in index) or any(i is Ellipsis for i in index):
            raise IndexError("blocks does not support None or Ellipsis: index each axis by block numbers")
        if len(index) > t.ndim:
            raise IndexError(f"too many indices for blocks: {len(index)} given, the tensor has {t.ndim} axes")
        out = t
        for axis, sel in enumerate(index):
            n = len(t.chunks[axis])
            if isinstance(sel, slice):
                picked = list(range(n))[sel]
            elif isinstance(sel, (int, np.integer)):
                if not -n <= sel < n:
                    raise IndexError(f"index {sel} is out of bounds for axis {axis} with {n} blocks")
                picked = [int(sel) % n]
            else:
                picked = [int(i) % n if -n <= int(i) < n else _out_of_bounds(i, axis, n) for i in sel]
            out = _pick_blocks(out, axis, t.chunks[axis], picked)
        return out


def _out_of_bounds(i, axis, n):
    raise IndexError(f"index {i} is out of bounds for axis {axis} with {n} blocks")


def _pick_blocks(t, axis, chunks, picked):
    starts = np.concatenate([[0], np.cumsum(chunks)]).astype(int).tolist()
    if picked == list(range(len(chunks))):
        return t

    def part(first, last):  # blocks first..last, one slice of the tensor
        key = [slice(None)] * t.ndim
        key[axis] = slice(starts[first], starts[last + 1])
        return t[tuple(key)]

    runs, first = [], None
    for k, b in enumerate(picked):
        if first is None:
            first = prev = b
        elif b == prev + 1:
            prev = b
        else:
            runs.append((first, prev))
            first = prev = b
        if k == len(picked) - 1:
            runs.append((first, prev))
    if not runs:
        key = [slice(None)] * t.ndim
        key[axis] = slice(0, 0)
        return t[tuple(key)]
    parts = [part(a, b) for a, b in runs]
    return parts[0] if len(parts) == 1 else concatenate(parts, axis=axis)


Tensor.map_blocks = _tensor_map_blocks
Tensor.blocks = property(_BlockIndexer, doc="Index by block numbers, as dask.array's ``Array.blocks``: "
                                            "``t.blocks[0]``, ``t.blocks[1:, [0, 2]]`` (differentiable).")
