"""torch's writes at indices: ``scatter``, ``scatter_add``, ``index_add``, ``index_copy``, ``index_fill``,
``masked_scatter`` and their in-place forms, and the one primitive they share (``set_along_axis``,
torch's ``ScatterBackward0``: a source written at an index along an axis into zeros, its rule a gather).

They are Tensor methods that speak torch, as those of :mod:`.methods`, and are installed on
:class:`~daskgrad.Tensor` the same way (:func:`.methods.install` of :data:`METHODS`); they live here because
they are one family, built from the same few helpers (``_put``, ``_scatter_operands``, the index checks),
that outgrew :mod:`.methods`.  A lazy index is checked in range inside the tasks that read it
(:func:`.methods._in_range`); no chunk comes to the host.
"""
from __future__ import annotations

import dask.array as da
import numpy as np

from .. import _dask as door
from ..graph import guard, named, primitive
from .._tensor import Tensor, full, tensor, zeros
from ._util import as_tensor, check_broadcast, is_empty, norm_axis, value
from .elementwise import astype, clone, ones_like, where, zeros_like
from .indexing import getitem
from .methods import _gather, _in_place, _in_range, _overload, _tensor_arg, _type_name, install
from .numpy_extra import gather_p, scatter_add_p, take_along_axis
from .numpy_index import _no_derivative
from .shape import broadcast_to, pad, rechunk, reshape


def _index_arg(index, device):
    """``index`` as a tensor, and its host values (None when it is a lazy tensor, read by no one here)."""
    if isinstance(index, Tensor):
        return index, None
    host = np.asarray(index)
    return tensor(host, device=device), host


def _set_block(src, idx, axis, n):
    """Zeros with ``src`` written at ``idx`` along ``axis`` (repeats: the last along ``axis`` wins)."""
    shape = src.shape[:axis] + (n,) + src.shape[axis + 1:]
    grid = [np.arange(m, like=src).reshape((1,) * d + (m,) + (1,) * (idx.ndim - d - 1))
            for d, m in enumerate(idx.shape)]
    grid[axis] = idx % n
    out = np.zeros_like(src, shape=shape)
    out[tuple(grid)] = src
    return out


def _set_array(src, idx, *, axis, n):
    chunks = tuple((n,) if k == axis else c for k, c in enumerate(src.chunks))
    return da.map_blocks(_set_block, src, idx, axis=axis, n=n, dtype=src.dtype, meta=src._meta, chunks=chunks)


def _whole_along(g, idx, axis):
    """``g`` chunked as ``idx`` but whole along ``axis``: what the gather of the rule takes."""
    chunks = tuple((g.shape[axis],) if k == axis else c for k, c in enumerate(idx.chunks))
    return g if g.chunks == chunks else rechunk(g, chunks)


# scatter's write (ScatterBackward0): ``src`` put at ``idx`` along an axis, into zeros; the rule is a gather
_set_p = primitive("set_along_axis", torch="ScatterBackward0", impl=_set_array, args=("src", "idx"), save=("idx",),
                   consts=("idx",))
_set_p.vjp(lambda g, s, *, axis, n: (gather_p.bind(_whole_along(g, s.idx, axis), s.idx, axis=axis, n=n),))


def _put(src, idx, dim, n, add, shape, chunks):
    """``src`` (read where ``idx`` reaches) written (``add``: added) at ``idx`` along ``dim`` into zeros
    of ``shape`` in ``chunks``: one task per chunk of ``idx`` (``dim`` whole in it), a NumPy write."""
    if src.shape != idx.shape:
        src = getitem(src, tuple(slice(0, m) for m in idx.shape))
    if len(src.chunks[dim]) > 1:
        src = rechunk(src, tuple(c if k != dim else (src.shape[dim],) for k, c in enumerate(src.chunks)))
    if idx.chunks != src.chunks:
        idx = rechunk(idx, src.chunks)
    out = (scatter_add_p if add else _set_p).bind(src, idx, axis=dim, n=n)
    if out.shape != tuple(shape):
        out = pad(out, [(0, a - b) for a, b in zip(shape, out.shape)])
    return out if out.chunks == chunks else rechunk(out, chunks)


def _one_d(x):
    return reshape(x, (1,)) if x.ndim == 0 else x


def _scatter_operands(self, dim, index, src):
    """torch's checks of ``scatter``/``scatter_add``: ``(x, idx, src, dim)`` with 0-d tensors read as 1-d,
    ``idx`` checked in range; ``idx`` None for an empty index (nothing is written)."""
    idx, host = _index_arg(index, self.device)
    if idx.dtype not in (np.int32, np.int64):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if src is not None and src.dtype != self.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    dim = norm_axis(dim, self.ndim)
    if is_empty(idx):
        return self, None, src, dim
    if idx.ndim != self.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if src is not None and 0 < src.ndim < idx.ndim:  # (torch reads src's size at each of the index's dims)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-src.ndim}, {src.ndim - 1}], but got "
                         f"{src.ndim})")
    if any(m > n for d, (m, n) in enumerate(zip(idx.shape, self.shape)) if d != dim) or (
            src is not None and src.ndim and any(m > n for m, n in zip(idx.shape, src.shape))):
        raise RuntimeError(f"Expected index {list(idx.shape)} to be no larger than self {list(self.shape)} apart "
                           f"from dimension {dim}" + ("" if src is None else
                                                      f" and to be no larger size than src {list(src.shape)}"))
    if src is not None and src.ndim != idx.ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    x, idx, src = _one_d(self), _one_d(idx), None if src is None else _one_d(src)
    host = None if host is None else host.reshape(idx.shape)
    n = x.shape[dim]
    idx = _in_range(idx, host, n, RuntimeError, f"index {{}} is out of bounds for dimension {dim} with size {n}")
    return x, idx, src, dim


def _mask_at(idx, dim, x):
    """Where ``idx`` writes into ``x`` (a boolean tensor of ``x``'s shape and chunks)."""
    return _put(ones_like(idx, dtype=np.bool_), idx, dim, x.shape[dim], False, x.shape, x.chunks)


def _scatter(self, dim, index, src=None, value=None, *, reduce=None):
    """torch's ``scatter``: ``self`` with ``src[i][j]`` written at ``[index[i][j]][j]`` (for ``dim`` 0), or
    the number ``value``; ``index`` no larger than ``self`` off ``dim`` nor than ``src``.  Where ``index``
    repeats a place torch leaves the result undefined; here the last along ``dim`` wins (torch's CPU
    kernel's).  Gradients are torch's: ``self``'s zero where written, ``src``'s a gather.  ``reduce='add'``
    adds instead, not differentiable (as torch's).  Cost: one task per chunk of ``index`` (``dim`` whole
    in it), a lazy index checked in range inside its tasks."""
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required positional argument: 'src' or 'value'")
    if src is not None and value is not None:  # (x.scatter(0, i, src, "add"): torch's reduce is a keyword only)
        got = ", ".join("Tensor" if isinstance(a, Tensor) else type(a).__name__ for a in (dim, index, src, value))
        raise TypeError(f"scatter() received an invalid combination of arguments - got ({got}), but expected one of:\n"
                        " * (int dim, Tensor index, Tensor src)\n"
                        " * (int dim, Tensor index, Tensor src, *, str reduce)\n"
                        " * (int dim, Tensor index, Number value)\n"
                        " * (int dim, Tensor index, Number value, *, str reduce)\n")
    third = src if src is not None else value
    src, value = (third, None) if isinstance(third, Tensor) else (None, third)
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError("reduce argument must be either add or multiply.")
        if reduce == "multiply":
            raise NotImplementedError("scatter(reduce='multiply') is not implemented in daskgrad")
        if src is None:
            idx = _index_arg(index, self.device)[0]
            src = full(idx.shape, value, dtype=self.dtype, device=self.device)
        out = _scatter_add(self.detach(), dim, index, src.detach())
        return _no_derivative(out, "scatter", self, src)
    x, idx, src, dim = _scatter_operands(self, dim, index, src)
    if idx is None:
        return clone(self)
    mask = _mask_at(idx, dim, x)
    new = self.dtype.type(value) if src is None else _put(src, idx, dim, x.shape[dim], False, x.shape, x.chunks)
    out = where(mask, new, x)
    return out if out.shape == self.shape else reshape(out, self.shape)


def _scatter_add(self, dim, index, src):
    """torch's ``scatter_add``: ``self`` with ``src[i][j]`` added at ``[index[i][j]][j]`` (for ``dim`` 0),
    repeats adding up; the gradient to ``src`` is a gather of the cotangent.  Cost as ``scatter``'s."""
    src = _tensor_arg(src, "scatter_add", "src", 3)
    x, idx, src, dim = _scatter_operands(self, dim, index, src)
    if idx is None:
        return clone(self)
    out = x + _put(src, idx, dim, x.shape[dim], True, x.shape, x.chunks)
    return out if out.shape == self.shape else reshape(out, self.shape)


def _vector_index(name, self, dim, idx, host, source=None):
    """``(x, idx, source, dim, host)`` of the ``index_*`` ops: 0-d tensors read as 1-d, ``idx`` 1-d."""
    dim = norm_axis(dim, self.ndim)
    x = _one_d(self)
    if idx.ndim > 1:
        text = {"index_add": f"index_add_(): Index is supposed to be a vector, but got dim: {idx.ndim} with type: "
                             f"{_type_name(idx.dtype)} and size: {list(idx.shape)}",
                "index_copy": f"index_copy_(): Index should have dimension 1 or 0 (got {idx.ndim})",
                "index_fill": "Index has to be a vector/scalar"}[name]
        raise (RuntimeError if name == "index_fill" else IndexError)(text)
    idx = _one_d(idx)
    host = None if host is None else host.reshape(-1)
    if source is not None:
        source = _one_d(source)
        k, m = idx.shape[0], source.shape[dim] if source.ndim > dim else 1
        if k != m:
            raise (RuntimeError if name == "index_add" else IndexError)(
                f"{name}_(): Number of indices ({k}) should be equal to source.size(dim)"
                + (f": ({m}), for dim: {dim}" if name == "index_add" else f" ({m})"))
    return x, idx, source, dim, host


def _along(idx, dim, ndim, shape):
    """The 1-d ``idx`` along ``dim`` of ``ndim`` dims, broadcast to ``shape``."""
    return broadcast_to(reshape(idx, (1,) * dim + (-1,) + (1,) * (ndim - dim - 1)), shape)


def _same_slices(name, x, source, dim):
    off = [(d, a, b) for d, (a, b) in enumerate(zip(x.shape, source.shape)) if d != dim and a != b]
    if x.ndim != source.ndim or off:
        if name == "index_add":
            raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                               f"Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}")
        d, a, b = off[0] if off else (0, x.ndim, source.ndim)
        d = d - (d > dim)
        raise RuntimeError("index_copy_(): Source/destination tensor must have same slice shapes. Destination slice "
                           f"shape: {a} at dimension {d} and source slice shape: {b} at dimension {d}.")


def _index_add(self, dim, index, source, *, alpha=1):
    """torch's ``index_add``: ``self`` with ``alpha * source``'s slices along ``dim`` added at the 1-d
    ``index`` (repeats add up); the gradient to ``source`` is ``alpha`` times the cotangent's slices at
    ``index``.  Cost: as ``scatter_add`` of ``index`` broadcast to ``source``'s shape."""
    return guard(_index_added(self, dim, index, source, alpha), source)  # (torch's saves source; index_put's not)


def _index_added(self, dim, index, source, alpha=1):
    source = _tensor_arg(source, "index_add", "source", 3)
    idx, host = _index_arg(index, self.device)
    if idx.dtype not in (np.int32, np.int64):
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: {_type_name(idx.dtype)}")
    x, idx, source, dim, host = _vector_index("index_add", self, dim, idx, host, source)
    if source.dtype != x.dtype:
        raise RuntimeError(f"index_add_(): self ({_type_name(x.dtype)}) and source ({_type_name(source.dtype)}) must "
                           "have the same scalar type")
    _same_slices("index_add", x, source, dim)
    n = x.shape[dim]
    idx = _in_range(idx, host, n, RuntimeError, f"index {{}} is out of bounds for dimension {dim} with size {n}")
    if not idx.shape[0]:
        return clone(self)
    added = _put(source if alpha == 1 else source * alpha, _along(idx, dim, x.ndim, source.shape), dim, n, True,
                 x.shape, x.chunks)
    out = x + added
    return out if out.shape == self.shape else reshape(out, self.shape)


def _index_mask(idx, dim, x):
    """Where the 1-d ``idx`` writes along ``dim`` of ``x``: a boolean tensor that broadcasts to ``x``."""
    n = x.shape[dim]
    mask = _put(ones_like(idx, dtype=np.bool_), idx, 0, n, False, (n,), (x.chunks[dim],))
    return reshape(mask, (1,) * dim + (n,) + (1,) * (x.ndim - dim - 1))


def _index_copy(self, dim, index, source):
    """torch's ``index_copy``: ``self`` with ``source``'s slices along ``dim`` written at the 1-d int64
    ``index`` (a repeat: the last wins, torch's CPU kernel's; torch leaves it undefined); the gradient
    to ``self`` is zero at the copied slices, to ``source`` the cotangent's slices there."""
    return guard(_index_copied(self, dim, index, source), source)  # (torch's saves source; index_put's not)


def _index_copied(self, dim, index, source):
    source = _tensor_arg(source, "index_copy", "source", 3)
    idx, host = _index_arg(index, self.device)
    if idx.dtype != np.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {_type_name(idx.dtype)}")
    x, idx, source, dim, host = _vector_index("index_copy", self, dim, idx, host, source)
    if source.dtype != x.dtype:
        raise RuntimeError("index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{_type_name(x.dtype)} and (source) {_type_name(source.dtype)}")
    _same_slices("index_copy", x, source, dim)
    n = x.shape[dim]
    idx = _in_range(idx, host, n, IndexError, f"index_copy_(): index {{}} is out of bounds for dimension {dim} with "
                                              f"size {n}")
    if not idx.shape[0]:
        return clone(self)
    new = _put(source, _along(idx, dim, x.ndim, source.shape), dim, n, False, x.shape, x.chunks)
    out = where(_index_mask(idx, dim, x), new, x)
    return out if out.shape == self.shape else reshape(out, self.shape)


def _index_fill(self, dim, index, value):
    """torch's ``index_fill``: ``self`` with the slices along ``dim`` at the 1-d int64 ``index`` (negative
    ones count from the end) set to ``value``, a number or a 0-d tensor (which gets their gradient)."""
    idx, host = _index_arg(index, self.device)
    if idx.dtype != np.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    x, idx, _, dim, host = _vector_index("index_fill", self, dim, idx, host)
    n = x.shape[dim]
    idx = _in_range(idx, host, n, IndexError, f"index {{}} is out of bounds for dimension {dim} with size {n}", -n)
    if not idx.shape[0]:
        return clone(self)
    value = (value if value.dtype == x.dtype else astype(value, x.dtype)) if isinstance(value, Tensor) \
        else x.dtype.type(value)
    out = where(_index_mask(idx, dim, x), value, x)
    return out if out.shape == self.shape else reshape(out, self.shape)


def _masked_position_block(m, pos, *, n):
    if (m & (pos >= n)).any():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    return np.where(m, pos, 0)


def _masked_positions_array(m, *, n):
    """For a 1-d boolean mask, each True place's position in the source (how many Trues precede it), 0
    at the other places; a position past the source's ``n`` elements raises torch's error in its task."""
    pos = da.cumsum(m.astype(np.int64), axis=0) - 1
    return da.map_blocks(_masked_position_block, m, pos, n=n, dtype=np.int64, meta=pos._meta)


def _masked_scatter(self, mask, source):
    """torch's ``masked_scatter``: ``self`` (broadcast with the boolean ``mask``) with the True places
    taking ``source``'s elements in order (row-major); the gradient to ``source`` is the cotangent at
    the True places, in order, zero beyond.  Cost: a running count of the mask, chunk by chunk, and a
    gather from ``source`` flattened into one chunk; too few elements in ``source`` raise torch's error
    from the tasks."""
    source = _tensor_arg(source, "masked_scatter", "source", 2)
    mask = as_tensor(mask)
    if mask.dtype != np.bool_:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{_type_name(mask.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{_type_name(self.dtype)} and {_type_name(source.dtype)}")
    check_broadcast(self.shape, mask.shape)
    shape = np.broadcast_shapes(self.shape, mask.shape)
    x = self if self.shape == shape else broadcast_to(self, shape)
    m = mask if mask.shape == shape else broadcast_to(mask, shape)
    flat = reshape(m, (-1,))
    pos = Tensor._make(door.defer(_masked_positions_array, (value(flat),), (("n", source.numel()),)))
    src = reshape(source, (-1,)) if source.numel() else zeros(1, dtype=self.dtype, device=self.device)
    return where(m, reshape(take_along_axis(src, pos, 0), shape), x)


# ----------------------------------------------------------------- scatter_reduce
_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _identity(reduce, dtype):
    if reduce in ("sum", "mean", "count"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if dtype.kind == "b":
        return reduce == "amin"
    info = np.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


def _reduce_block(src, idx, axis, n, reduce, seed=None):
    """``src`` reduced at ``idx`` along ``axis`` into ``n`` places holding the reduction's identity, or
    ``seed``'s values (``self``'s, which torch's kernel reduces first; ``count``: how many reach each
    place), in order along ``axis`` as torch's: a ``ufunc.at``, or for ``prod`` (no ``multiply.at`` on
    cupy) one multiplication per place along ``axis``, whose writes never meet.  Half sums and products
    accumulate in float32 (torch's), returned in float32."""
    dtype = np.dtype(np.int64) if reduce == "count" else src.dtype
    if dtype == np.float16 and reduce in ("sum", "mean", "prod"):
        dtype, src = np.dtype(np.float32), src.astype(np.float32)
    shape = src.shape[:axis] + (n,) + src.shape[axis + 1:]
    out = np.full_like(src, _identity(reduce, dtype), dtype=dtype, shape=shape) if seed is None else \
        seed.astype(dtype)  # (a copy)
    grid = [np.arange(m, like=src).reshape((1,) * d + (m,) + (1,) * (idx.ndim - d - 1))
            for d, m in enumerate(idx.shape)]
    grid[axis] = idx % n
    if reduce == "prod":
        for k in range(idx.shape[axis]):
            here = (slice(None),) * axis + (slice(k, k + 1),)
            at = tuple(g[here] if g.shape[axis] > 1 else g for g in grid)
            out[at] = out[at] * src[here]
        return out
    ufunc = {"sum": np.add, "mean": np.add, "count": np.add, "amax": np.maximum, "amin": np.minimum}[reduce]
    flat, stride = 0, 1  # (cupy's ufunc.at takes one index array: the places in the flattened output)
    for d in range(len(shape) - 1, -1, -1):
        flat, stride = flat + grid[d] * stride, stride * shape[d]
    flat = np.broadcast_to(flat, idx.shape).reshape(-1)
    out = out.reshape(-1)
    ufunc.at(out, flat, np.ones_like(flat) if reduce == "count" else src.reshape(-1))
    return out.reshape(shape)


def _scatter_reduce_array(x, src, idx, *, axis, reduce, include_self):
    if src.shape != idx.shape:
        src = src[tuple(slice(0, m) for m in idx.shape)]
    src = src.rechunk({axis: -1})
    idx = idx.rechunk(src.chunks)
    n = x.shape[axis]
    chunks = tuple((n,) if k == axis else c for k, c in enumerate(src.chunks))
    widths = [(0, a - (n if k == axis else b)) for k, (a, b) in enumerate(zip(x.shape, idx.shape))]
    seeded = include_self and reduce in ("sum", "prod", "mean")
    if seeded:  # (self's values first, as torch's kernel: self + s0 + s1 ..., not (s0 + s1 ...) + self)
        seed = x[tuple(slice(None) if k == axis else slice(0, m) for k, m in enumerate(idx.shape))].rechunk(chunks)
    whole = []
    for how in (reduce, "count"):
        dtype = np.int64 if how == "count" else np.float32 if x.dtype == np.float16 and how != "amax" and \
            how != "amin" else x.dtype
        more = (seed,) if seeded and how != "count" else ()
        part = da.map_blocks(_reduce_block, src, idx, axis, n, how, *more, dtype=dtype, chunks=chunks,
                             meta=src._meta.astype(dtype))
        whole.append(da.pad(part, widths).rechunk(x.chunks) if any(w for _, w in widths) else part.rechunk(x.chunks))
    reduced, count = whole
    if reduce in ("sum", "prod"):
        out = reduced
    elif reduce == "mean":  # (half: the float32 sum rounded to half, then divided in half, as torch's)
        total, count = reduced.astype(x.dtype), count + 1 if include_self else count
        out = total // np.maximum(count, 1).astype(x.dtype) if x.dtype.kind in "iu" else \
            (total / np.maximum(count, 1).astype(x.dtype)).astype(x.dtype)
    else:
        out = (np.maximum if reduce == "amax" else np.minimum)(reduced, x) if include_self else reduced
    return da.where(whole[1] > 0, out.astype(x.dtype), x)


_scatter_reduce_p = primitive("scatter_reduce", torch="ScatterReduceBackward0", impl=_scatter_reduce_array,
                              args=("x", "src", "idx"), save=("x", "src", "idx", "r"), consts=("idx",))


@_scatter_reduce_p.vjp
def _scatter_reduce_rule(g, s, *, axis, reduce, include_self):
    """torch's ``scatter_reduce_backward``: ``sum`` the cotangent (and its gather), ``mean`` it over the
    count at each place, ``amax``/``amin`` shared evenly by the places holding the result, ``prod`` the
    product of the others (at a single zero too, by a second reduction with it as one)."""
    x, idx, r = s.x, s.idx, s.r
    src = s.src if s.src.shape == idx.shape else getitem(s.src, tuple(slice(0, m) for m in idx.shape))

    def gather(t):
        return _gather(t, axis, idx)

    def counted(t, u):
        return _scatter_add(t, axis, idx, u)
    if reduce == "sum":
        g_self, g_src = g, gather(g)
    elif reduce == "mean":
        count = counted(ones_like(x) if include_self else zeros_like(x), ones_like(src))
        count = where(count == 0, 1, count)
        g_self, g_src = g / count, gather(g) / gather(count)
    elif reduce in ("amax", "amin"):
        self_is = astype(x == r, x.dtype)
        src_is = astype(src == gather(r), x.dtype)
        shared = g / counted(self_is, src_is)
        g_self, g_src = self_is * shared, src_is * gather(shared)
    else:
        masked_self = where(x == 0, 1, x)
        g_self = g * _scatter_reduce_p.bind(masked_self, src, idx, axis=axis, reduce="prod",
                                            include_self=include_self) / masked_self
        src_zero = src == 0
        zeros_at = gather(counted(zeros_like(x), astype(src_zero, x.dtype)))
        single = src_zero & (zeros_at == 1)
        others = _scatter_reduce_p.bind(x, where(single, 1, src), idx, axis=axis, reduce="prod",
                                        include_self=include_self)
        g_src = where(single, gather(g * others), gather(g * r) / where(src_zero, 1, src))
    if not include_self:
        g_self = where(_mask_at(idx, axis, x), 0, g_self)
    if g_src.shape != s.src.shape:
        g_src = pad(g_src, [(0, a - b) for a, b in zip(s.src.shape, g_src.shape)])
    return g_self, g_src


def _scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    """torch's ``scatter_reduce``: ``self`` with ``src[i][j]`` reduced into ``[index[i][j]][j]`` (for
    ``dim`` 0) by ``reduce`` (``sum``, ``prod``, ``mean``: a floor division for integers, ``amax``,
    ``amin``), ``self``'s value taking part unless ``include_self=False``; places no index reaches keep
    ``self``'s.  Checks as ``scatter``'s; torch's gradients (:func:`_scatter_reduce_rule`).  Cost: one
    task per chunk of ``index`` (``dim`` whole in it), twice (the values, the counts)."""
    src = _tensor_arg(src, "scatter_reduce", "src", 3)
    if reduce not in _REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if reduce in ("amax", "amin") and self.dtype.kind == "c":
        raise NotImplementedError(f"\"scatter_gather_tensor_cpu_reduce_{reduce}\" not implemented for "
                                  f"'{_type_name(self.dtype)}'")
    x, idx, src, dim = _scatter_operands(self, dim, index, src)
    if idx is None:
        return clone(self)
    out = _scatter_reduce_p.bind(x, src, idx, axis=dim, reduce=reduce, include_self=bool(include_self))
    return out if out.shape == self.shape else reshape(out, self.shape)


# ----------------------------------------------------------------- index_put
_INDEX_DTYPES = (np.int64, np.int32, np.uint8, np.bool_)


def _put_index(i, device):
    """One index of ``index_put``: a tensor (a host array is read as one), of torch's index dtypes."""
    if i is None:
        raise TypeError("expected Tensor as element 0 in argument 0, but got NoneType")
    i, host = _index_arg(i, device)
    if i.dtype not in _INDEX_DTYPES:
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return (astype(i, np.bool_) if i.dtype == np.uint8 else i), host


def _index_put(self, indices, values, accumulate=False):
    """torch's ``index_put``: ``self`` with ``values`` (broadcast to the indexed shape) written at
    ``self[indices]`` (``accumulate``: added, repeats adding up; else a repeat's last write wins, torch's
    CPU kernel's); ``indices`` a tuple of integer tensors over the leading dims (broadcast together,
    negative ones from the end) or one boolean mask.  As the flat positions of those dims, an
    ``index_add``/``index_copy`` along dim 0 of ``self`` with them merged; a mask, a ``where`` or a
    ``masked_scatter``.  Gradients torch's (``values``' summed where broadcast)."""
    if not isinstance(values, Tensor):
        raise TypeError(f"index_put(): argument 'values' (position 2) must be Tensor, not {type(values).__name__}")
    indices, hosts = zip(*[_put_index(i, self.device) for i in indices]) if len(indices) else ((), ())
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_type_name(self.dtype).capitalize()} for the destination and "
                           f"{_type_name(values.dtype).capitalize()} for the source.")
    if not indices:
        raise NotImplementedError("index_put with no indices is not implemented in daskgrad")
    masks = [i for i in indices if i.dtype == np.bool_]
    k = sum(i.ndim if i.dtype == np.bool_ else 1 for i in indices)
    if k > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {k})")
    if masks:
        if len(indices) > 1:
            raise NotImplementedError("index_put with a boolean mask beside other indices is not implemented in "
                                      "daskgrad")
        return _mask_put(self, indices[0], values, accumulate)
    shape, rest = self.shape[:k], self.shape[k:]
    idx = [i if i.dtype == np.int64 else astype(i, np.int64) for i in indices]
    shape_i = np.broadcast_shapes(*(i.shape for i in idx))
    flat, stride = None, 1
    for d in range(k - 1, -1, -1):
        n = shape[d]
        i = _in_range(idx[d], hosts[d], n, IndexError, f"index {{}} is out of bounds for dimension {d} with size {n}",
                      -n)
        i = (i % n) * stride
        flat, stride = i if flat is None else flat + i, stride * n
    flat = reshape(broadcast_to(flat, shape_i), (-1,))
    target = tuple(shape_i) + tuple(rest)
    try:
        check_broadcast(target, values.shape)
        np.broadcast_shapes(target, values.shape)
        if len(values.shape) > len(target):
            raise ValueError
    except (RuntimeError, ValueError):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(target)}") from None
    source = reshape(broadcast_to(values, target), (-1,) + tuple(rest))
    x = reshape(self, (-1,) + tuple(rest))
    out = (_index_added if accumulate else _index_copied)(x, 0, flat, source)
    return reshape(out, self.shape)


def _mask_row_block(m, pos, total, *, rows, fits, message):
    total = int(total)
    if not fits or rows not in (1, total):
        raise RuntimeError(message.format(total))
    return np.where(m, pos, 0) if rows > 1 else np.zeros_like(pos)


def _mask_rows_array(m, *, rows, fits, message):
    """For a 1-d boolean mask, the row of ``values`` each True place takes (how many Trues precede it; 0
    for one row); torch's shape mismatch, raised in the tasks, unless ``values`` (``fits``: its other dims
    do) has one row or one per True place (their count is in ``message``)."""
    pos = da.cumsum(m.astype(np.int64), axis=0) - 1
    return da.map_blocks(_mask_row_block, m, pos, m.sum(), rows=rows, fits=fits, message=message, dtype=np.int64,
                         meta=pos._meta)


def _mask_put(self, mask, values, accumulate):
    """``index_put`` at one boolean mask over the leading dims, as torch's ``index_put`` at the mask's
    nonzero places: ``values`` broadcast to ``(number of Trues, *rest)`` (one row for every place, or a
    row per place in order; another count raises torch's error from the tasks), gathered to the masked
    places and written (or added) there by a ``where`` (an unmasked inf stays inf)."""
    k = mask.ndim
    for d, (a, b) in enumerate(zip(mask.shape, self.shape)):
        if a != b:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {d} does not match the shape of the "
                             f"indexed tensor {list(self.shape)} at index {d}")
    full_mask = broadcast_to(reshape(mask, mask.shape + (1,) * (self.ndim - k)), self.shape)
    rest = self.shape[k:]
    fits = values.ndim <= len(rest) + 1
    try:
        np.broadcast_shapes(values.shape[-len(rest):] if rest and fits else (), rest)
    except ValueError:
        fits = False
    rows = values.shape[0] if fits and values.ndim == len(rest) + 1 else 1
    if fits and rows == 1:  # one value for every masked place
        v = reshape(values, values.shape[1:]) if values.ndim > len(rest) else values
        return where(full_mask, self + v if accumulate else v, self)
    message = (f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to indexing result "
               f"of shape [{{}}{''.join(f', {n}' for n in rest)}]")
    flat = reshape(mask, (-1,))
    pos = Tensor._make(door.defer(_mask_rows_array, (value(flat),),
                                  (("rows", rows), ("fits", fits), ("message", message))))
    if not fits:  # (raises from the tasks, with the count in torch's message)
        values = zeros((1,) + tuple(rest), dtype=self.dtype, device=self.device)
        rows = 1
    source = broadcast_to(values, (rows,) + tuple(rest)) if rows else zeros((1,) + tuple(rest), dtype=self.dtype,
                                                                              device=self.device)
    picked = reshape(getitem(source, pos), self.shape)
    return where(full_mask, self + picked if accumulate else picked, self)


METHODS = {
    "scatter": _scatter, "scatter_add": _scatter_add, "index_add": _index_add, "index_copy": _index_copy,
    "index_fill": _index_fill, "masked_scatter": _masked_scatter, "index_put": _index_put,
    "scatter_reduce": _scatter_reduce,
}


def _scatter_node(self, dim, index, src=None, value=None, *, reduce=None):
    """torch's node of ``scatter``: ``ScatterBackward0`` of a tensor ``src``, ``1`` of a number; with ``reduce``
    none of these (torch's NotImplemented, as here)."""
    if reduce is not None:
        return None
    return "ScatterBackward0" if isinstance(src if src is not None else value, Tensor) else "ScatterBackward1"


# torch's nodes of these compositions (a ``where``'s, an ``add``'s ...), out of place and in place alike
_NODES = {"scatter": _scatter_node, "scatter_add": "ScatterAddBackward0", "index_add": "IndexAddBackward0",
          "index_copy": "IndexCopyBackward0", "index_fill": _overload("IndexFill", 1, 0),
          "masked_scatter": "MaskedScatterBackward0", "index_put": "IndexPutBackward0"}
METHODS.update({name: named(node)(METHODS[name]) for name, node in _NODES.items()})
# torch's in-place forms: the method's result written into the tensor
METHODS.update({f"{name}_": _in_place(METHODS[name], f"{name}_") for name in list(METHODS)})
install(METHODS, __name__)
