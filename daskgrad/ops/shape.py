"""Shape ops (contract: see ``elementwise.py``; indexing is in ``indexing.py``).

These ops are linear, so each rule is the transposed op: reshape back,
inverse permutation, sum over broadcast axes, split for concatenation.  None
of them saves a tensor, so, as in torch, they can be traversed twice.
"""
from __future__ import annotations

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from .. import _dask as door
from .._dask import unknown as _unknown
from ..graph import View, primitive, type_repr
from .. import _data
from .._tensor import Tensor, _ViewStorage, contiguous_strides, layout, recorded
from ._util import as_tensor, norm_axes, norm_axis, public, shape_args



# ------------------------------------------------------------------- reshaping
def _view_strides(old, strides, new):
    """torch's ``computeStride``: the strides of a view of shape ``new`` of a tensor of shape ``old``
    and ``strides``, or None where its elements cannot be walked with strides (a copy is needed)."""
    if not old:
        return (1,) * len(new)
    if any(n != n for n in old):  # unknown lengths (after a boolean mask): a copy
        return None
    if not int(np.prod(old, dtype=np.int64)):
        return tuple(strides) if tuple(old) == tuple(new) else contiguous_strides(new)
    out, view_d = [0] * len(new), len(new) - 1
    base, tensor_numel, view_numel = strides[-1], 1, 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and strides[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * base
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base, tensor_numel, view_numel = strides[d - 1], 1, 1
    return tuple(out) if view_d == -1 else None


def _reshape_layout(x_shape, x_strides, x_offset, out_shape, *, shape, old):
    strides = _view_strides(x_shape, x_strides, out_shape)
    return None if strides is None else (strides, x_offset)


# x.reshape(...) views x where torch's does (ViewBackward0), else copies (UnsafeViewBackward0)
reshape_p = primitive("reshape", torch=("ViewBackward0", "UnsafeViewBackward0"),
                      impl=lambda a, *, shape, old: _reshape_array(a, shape),
                      view=View(_reshape_layout, lambda a, new, *, shape, old: _reshape_array(new, old)))
reshape_p.vjp(lambda g, s, *, shape, old: (reshape(g, old),))

_VIEW_ERROR = ("view size is not compatible with input tensor's size and stride (at least one dimension spans "
               "across two contiguous subspaces). Use .reshape(...) instead.")


def _view_method(reshape):
    """torch's ``x.view(shape)``: a view, or its error where the elements cannot be walked as ``shape``;
    ``x.view(dtype)``: the same memory read as ``dtype`` (:func:`_view_dtype`)."""
    def view(self, *shape, dtype=None):
        if dtype is not None or len(shape) == 1 and _is_dtype(shape[0]):
            if dtype is not None and shape:
                raise TypeError("view() received an invalid combination of arguments")
            return _view_dtype(self, shape[0] if dtype is None else dtype)
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        out = reshape(self, shape)
        if not out._is_view() and all(n == n for n in self.shape):
            raise RuntimeError(_VIEW_ERROR)
        return out
    view.__wrapped__ = reshape
    return view


def _is_dtype(x):
    return (isinstance(x, np.dtype) or isinstance(x, type) and issubclass(x, np.generic)
            or type(x).__name__ == "dtype" and _data.package(x) == "torch")  # (torch.float32, not a torch.Size)


# ------------------------------------------------------------------- the same memory as another dtype
def _bitcast_array(a, *, dtype):
    """``a``'s bytes read as ``dtype``, chunk by chunk (NumPy's and cupy's ``ndarray.view(dtype)``): the last
    axis's chunks scaled by the ratio of the item sizes, rechunked first to lengths that divide."""
    ratio = a.dtype.itemsize / dtype.itemsize
    if ratio == 1:
        return a.map_blocks(_bitcast_chunk, dtype=dtype, meta=a._meta.astype(dtype), new_dtype=dtype)
    if ratio < 1:  # (upsizing: each chunk of the last axis a whole number of new elements)
        k = int(round(1 / ratio))
        ends = sorted({round(e / k) * k for e in np.cumsum(a.chunks[-1])} - {0})
        last = tuple(np.diff([0] + ends).tolist())
        if last != a.chunks[-1]:
            a = a.rechunk(a.chunks[:-1] + (last,))
    chunks = a.chunks[:-1] + (tuple(int(c * ratio) for c in a.chunks[-1]),)
    return a.map_blocks(_bitcast_chunk, dtype=dtype, chunks=chunks, meta=a._meta.astype(dtype), new_dtype=dtype)


def _bitcast_chunk(c, new_dtype):
    try:
        return c.view(new_dtype)
    except ValueError:  # (a chunk not contiguous along its last axis: NumPy views only contiguous bytes)
        return c.copy().view(new_dtype)


def _bitcast(a, *, dtype, old):
    return _bitcast_array(a, dtype=dtype)


def _bitcast_layout(x_shape, x_strides, x_offset, out_shape, *, dtype, old):
    """torch's ``view(dtype)`` strides and offset: in elements of the new size."""
    ratio = old.itemsize / dtype.itemsize
    if ratio == 1:
        return tuple(x_strides), x_offset
    strides = tuple(int(s * ratio) for s in x_strides[:-1]) + (1,)
    return strides, int(x_offset * ratio)


def _bitcast_put(a, new, *, dtype, old):
    """A write through the ``dtype`` view: its bytes read as ``old`` again.  (A mask of where the view was
    written, a boolean array as long as the view: an element of ``a`` is written where its bytes were.)"""
    if new.dtype == bool and a.dtype == bool and not (old.kind == dtype.kind == "b"):  # (the mask, not values)
        if old.itemsize == dtype.itemsize:
            return new if new.chunks == a.chunks else new.rechunk(a.chunks)
        ratio = old.itemsize // dtype.itemsize
        if ratio > 1:
            return new.reshape(new.shape[:-1] + (a.shape[-1], ratio)).any(axis=-1).rechunk(a.chunks)
        return da.repeat(new, dtype.itemsize // old.itemsize, axis=-1).rechunk(a.chunks)
    out = _bitcast_array(new, dtype=old)
    return out if out.chunks == a.chunks else out.rechunk(a.chunks)


class _Bitcast:
    """The view step of ``x.view(dtype)`` (the ``(prim, node, params)`` a view storage replays): not one of
    torch's autograd views, and no primitive (no gradient), but its memory is shared all the same."""

    name, elementwise = "view_dtype", False
    impl = staticmethod(_bitcast)
    view = View(_bitcast_layout, _bitcast_put)


def _view_dtype(self, dtype):
    """torch's ``x.view(dtype)``: the same memory read as ``dtype``, sharing ``x``'s storage and version
    counter (a write to either is seen by both) but not its history: the result never requires grad and
    is not one of autograd's views (``_base`` is None), as torch's.  Item sizes that differ scale the last
    dim (torch's conditions and errors: the last dim's stride 1, its length, the offset and the other
    strides divisible by the ratio)."""
    x = as_tensor(self)
    new = _data.np_dtype(dtype)
    old = x.dtype
    if old.itemsize != new.itemsize and x.ndim and x.shape[-1] != x.shape[-1]:
        raise NotImplementedError("view(dtype): the last dimension has an unknown length (after a boolean mask, "
                                  "say): its elements cannot be regrouped lazily; compute_chunk_sizes() first")
    names = (_data.TORCH_TYPE_NAMES.get(old.name, old.name), _data.TORCH_TYPE_NAMES.get(new.name, new.name))
    if new.name not in _data.TORCH_TYPE_NAMES:
        raise TypeError(f"view(): argument 'dtype' must be torch.dtype, not {type(dtype).__name__}")
    strides, offset = layout(x)
    if old.itemsize != new.itemsize:
        what = f" to view {names[0]} as {names[1]} (different element sizes)"
        if not x.ndim:
            raise RuntimeError(f"self.dim() cannot be 0{what}")
        if old.itemsize < new.itemsize:
            ratio = new.itemsize // old.itemsize
            if x.shape[-1] % ratio:
                raise RuntimeError(f"self.size(-1) must be divisible by {ratio}{what}, but got {x.shape[-1]}")
            if offset % ratio:
                raise RuntimeError(f"self.storage_offset() must be divisible by {ratio}{what}, but got {offset}")
        if strides[-1] != 1:
            raise RuntimeError(f"self.stride(-1) must be 1{what}, but got {strides[-1]}")
        if old.itemsize < new.itemsize:
            for i, s in enumerate(strides[:-1]):
                if s % ratio:
                    raise RuntimeError(f"self.stride({i}) must be divisible by {ratio}{what}, but got {s}")
    params = {"dtype": new, "old": old}
    out = Tensor._make(door.defer(_bitcast, (recorded(x),), tuple(params.items())))
    st = x._storage
    if type(st) is _ViewStorage:
        root, steps = st.root, st.steps
    else:
        root, steps = st, ()
    out._storage = _ViewStorage(root, steps + ((_Bitcast, None, params),), *_bitcast_layout(
        x.shape, strides, offset, out.shape, **params), out._storage.value)
    return out


# ------------------------------------------------------------------- complex numbers as pairs of reals
_REAL_OF = {np.dtype("complex64"): np.dtype("float32"), np.dtype("complex128"): np.dtype("float64")}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _as_real_array(a):
    """A complex array's (real, imaginary) pairs along a new last axis of length 2, chunk by chunk."""
    real = _REAL_OF[a.dtype]
    return a.map_blocks(_as_real_chunk, dtype=real, chunks=a.chunks + ((2,),), new_axis=a.ndim,
                        meta=meta_from_array(a._meta.real, a.ndim + 1), real=real)


def _as_real_chunk(c, real):
    # (the bytes of each element read as two reals: a length-1 last axis first, for 0-d chunks)
    return _bitcast_chunk(c.reshape(c.shape + (1,)), real).reshape(c.shape + (2,))


def _as_complex_array(a):
    """Pairs of reals along the last axis (length 2) as complex numbers, chunk by chunk."""
    cplx = _COMPLEX_OF[a.dtype]
    if len(a.chunks[-1]) > 1:
        a = a.rechunk({a.ndim - 1: -1})
    return a.map_blocks(_as_complex_chunk, dtype=cplx, chunks=a.chunks[:-1], drop_axis=a.ndim - 1,
                        meta=meta_from_array(a._meta, a.ndim - 1, cplx), cplx=cplx)


def _as_complex_chunk(c, cplx):
    return _bitcast_chunk(c, cplx)[..., 0]


def _as_real_put(a, new):
    """A write through ``view_as_real`` onto its complex base (or, given booleans, where it wrote:
    an element where either part was)."""
    if new.dtype == bool and a.dtype == bool:
        return new.any(axis=-1)
    return _as_complex_array(new.astype(_REAL_OF[a.dtype]) if new.dtype != _REAL_OF[a.dtype] else new)


def _as_complex_put(a, new):
    if new.dtype == bool and a.dtype == bool:
        return da.stack([new, new], axis=-1).rechunk(a.chunks)
    return _as_real_array(new.astype(_COMPLEX_OF[a.dtype]) if new.dtype != _COMPLEX_OF[a.dtype] else new)


def _as_real_layout(x_shape, x_strides, x_offset, out_shape):
    """torch's: each complex element is two reals, the real part first."""
    return tuple(2 * s for s in x_strides) + (1,), 2 * x_offset


def _as_complex_layout(x_shape, x_strides, x_offset, out_shape):
    return tuple(s // 2 for s in x_strides[:-1]), x_offset // 2


view_as_real_p = primitive("view_as_real", torch="ViewAsRealBackward0", impl=_as_real_array,
                           view=View(_as_real_layout, _as_real_put))
view_as_complex_p = primitive("view_as_complex", torch="ViewAsComplexBackward0", impl=_as_complex_array,
                              view=View(_as_complex_layout, _as_complex_put))
view_as_real_p.vjp(lambda g, s: (view_as_complex_p.bind(g),))
view_as_complex_p.vjp(lambda g, s: (view_as_real_p.bind(g),))


@public()
def view_as_real(x):
    """torch's ``view_as_real``: a complex tensor's elements as (real, imaginary) pairs along a new last
    axis of length 2, a view sharing its storage (a write to either is seen by the other)."""
    x = as_tensor(x)
    if x.dtype.kind != "c":
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return view_as_real_p.bind(x)


@public()
def view_as_complex(x):
    """torch's ``view_as_complex``: pairs of reals along a last axis of length 2 as complex numbers, a view
    sharing the tensor's storage; torch's conditions on the layout (the pairs adjacent in memory)."""
    x = as_tensor(x)
    if x.dtype not in _COMPLEX_OF:
        name = _data.TORCH_TYPE_NAMES.get(x.dtype.name, x.dtype.name)
        if x.dtype == np.float16:  # (torch's complex32: NumPy has no such dtype)
            raise NotImplementedError("view_as_complex of a float16 tensor: complex32 has no NumPy dtype")
        raise RuntimeError("view_as_complex is only supported for half, float and double tensors, but got a tensor "
                           f"of scalar type: {name}")
    if not x.ndim:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if x.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    strides, offset = layout(x)
    if strides[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in strides[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if offset % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return view_as_complex_p.bind(x)


@public(("reshape", shape_args), ("view", _view_method))
def reshape(x, shape):
    """NumPy's ``reshape`` (one ``-1`` infers a length); the methods also take torch's spelling
    ``x.reshape(2, 3)``.  As torch's (and NumPy's), the result is a view of ``x`` sharing its storage
    when its elements can be walked with strides (``x.view(2, 3)`` insists), else a copy."""
    x = as_tensor(x)
    old = x.shape
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    _check_reshape(shape, old)
    if -1 in shape and all(n == n for n in old):
        known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
        new = tuple(int(np.prod(old, dtype=np.int64)) // known if n == -1 else n for n in shape)
    else:
        new = shape
    strides = layout(x, offset=False)[0]
    node = "ViewBackward0" if _view_strides(old, strides, new) is not None else "UnsafeViewBackward0"
    return reshape_p.bind(x, node=node, shape=shape, old=old)


def _check_reshape(shape, old):
    """torch's errors for a shape that does not fit (dask's ValueError or a silent NaN size otherwise)."""
    if any(n != n for n in old):
        return  # unknown size after a boolean mask: dask decides
    if sum(1 for n in shape if n == -1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for i, n in enumerate(shape):
        if n < -1:
            raise RuntimeError(f"invalid shape dimension {n} at index {i} of shape {list(shape)}")
    size = int(np.prod(old, dtype=np.int64))
    known = int(np.prod([n for n in shape if n != -1], dtype=np.int64))
    if -1 in shape and known == 0 and size == 0:
        raise RuntimeError(f"cannot reshape tensor of 0 elements into shape {list(shape)} because the unspecified "
                           "dimension size -1 can be any value and is ambiguous")
    if (size != known if -1 not in shape else (known == 0 or size % known)):
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {size}")


def _unknown_reshape(a, shape):
    """``a`` (one axis of unknown length, after a boolean mask) reshaped to ``shape`` block by block, lazily:
    where the axes before the unknown one keep their product and those after it are split or merged into it by
    a factor (``m.reshape(-1, 1)``, ``m.view(-1)``, ``rows.flatten()``), each block is a run of whole slices
    along it, reshaped alone; ``shape`` gives the unknown length as -1 (or NaN, as a shape read from a tensor).
    Any other reshape needs the lengths, which only computing tells: refused (nothing is computed behind the
    caller's back)."""
    old = a.shape
    u = [i for i, n in enumerate(old) if n != n]
    p = [i for i, n in enumerate(shape) if n == -1 or n != n]

    def prod(ns):
        return int(np.prod(ns, dtype=np.int64))
    if len(u) != 1 or len(p) != 1 or any(n == 0 for n in old if n == n):
        raise NotImplementedError(
            f"reshape of a tensor of shape {tuple(old)} to {tuple(shape)}: its lengths are not known until it is "
            "computed (after a boolean mask: dask's unknown chunk sizes), and this reshape cannot be done block by "
            "block without them")
    u, p = u[0], p[0]
    inner, new_inner = prod(old[u + 1:]), prod(shape[p + 1:])
    if prod(old[:u]) != prod(shape[:p]) or not (inner % new_inner == 0 or shape[p] != shape[p]
                                                  and new_inner % inner == 0):
        raise NotImplementedError(
            f"reshape of a tensor of shape {tuple(old)} to {tuple(shape)}: the length of axis {u} is not known "
            "until it is computed (after a boolean mask: dask's unknown chunk sizes), and this reshape would regroup "
            "elements across its blocks, whose lengths it needs")
    a = a.rechunk({i: -1 for i in range(a.ndim) if i != u})  # (the known axes whole: each block whole slices)
    nan = ((np.nan,) * a.numblocks[u],)
    meta = a._meta.reshape(-1) if hasattr(a._meta, "reshape") else a._meta
    flat = a.map_blocks(_ravel_block, drop_axis=[i for i in range(a.ndim) if i != u], chunks=nan, dtype=a.dtype,
                        meta=meta) if a.ndim > 1 else a
    block = tuple(int(n) for n in shape[:p]) + (-1,) + tuple(int(n) for n in shape[p + 1:])
    if len(block) == 1:
        return flat
    chunks = tuple((n,) for n in block[:p]) + nan + tuple((n,) for n in block[p + 1:])
    return flat.map_blocks(_reshape_block, new_axis=[i for i in range(len(block)) if i != p], chunks=chunks,
                           dtype=a.dtype, meta=meta.reshape((0,) * len(block)) if hasattr(meta, "reshape") else meta,
                           block=block)


def _ravel_block(b):
    return b.reshape(-1)


def _reshape_block(b, block):
    return b.reshape(block)


def _reshape_array(a, shape):
    if any(n != n for n in a.shape):
        return _unknown_reshape(a, shape)
    if not a.size and a.npartitions > 1:  # (dask's reshape of an empty array of several chunks fails)
        a = a.rechunk(-1)
    try:
        return a.reshape(shape)
    except NotImplementedError:  # dask reshapes only even merges/splits of chunks
        pass
    try:
        return a.rechunk({i: -1 for i in range(1, a.ndim)}).reshape(shape)
    except NotImplementedError:
        return a.rechunk(-1).reshape(shape)


@public("flatten")
def flatten(x, start_dim=0, end_dim=-1):
    """Axes ``start_dim`` to ``end_dim`` merged into one, all of them by default (a 1-d tensor: NumPy's
    ``ndarray.flatten``; torch's ``flatten``, a 0-d tensor becoming 1-d)."""
    x = as_tensor(x)
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = norm_axis(start_dim, x.ndim), norm_axis(end_dim, x.ndim)
    if start > end:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if start == end:
        return x
    merged = x.shape[start:end + 1]
    n = int(np.prod(merged, dtype=np.int64)) if all(k == k for k in merged) else -1  # (NaN: after a mask)
    return reshape(x, x.shape[:start] + (n,) + x.shape[end + 1:])


def _transpose_method(transpose):
    """``x.transpose(0, 1)`` swaps two axes, as torch's (also ``dim0=``/``dim1=``); ``x.transpose()`` and
    ``x.transpose(axes)``, which torch refuses, permute, as NumPy's."""
    def method(self, *axes, dim0=None, dim1=None):
        if dim0 is not None or dim1 is not None:
            axes = axes + tuple(d for d in (dim0, dim1) if d is not None)
        if len(axes) == 2:
            return swapaxes(self, *axes)
        return transpose(self, axes[0] if len(axes) == 1 else (axes or None))
    method.__wrapped__ = transpose
    return method


# torch names the node by the method: x.T, permute, movedim PermuteBackward0; transpose(0, 1), swapaxes,
# mT TransposeBackward0; t() TBackward0
transpose_p = primitive("transpose", torch=("PermuteBackward0", "TransposeBackward0", "TBackward0"),
                        impl=lambda a, *, perm, inverse: da.transpose(a, perm),
                        view=View(lambda x_shape, x_strides, x_offset, out_shape, *, perm, inverse:
                                  (tuple(x_strides[p] for p in perm), x_offset),
                                  lambda a, new, *, perm, inverse: da.transpose(new, inverse)))
transpose_p.vjp(lambda g, s, *, perm, inverse: (transpose(g, inverse),))


@public(("transpose", _transpose_method))
def transpose(x, axes=None):
    """Permute axes (all reversed by default, as in NumPy)."""
    x = as_tensor(x)
    return permuted(x, tuple(range(x.ndim))[::-1] if axes is None else _perm(axes, x.ndim))


def permuted(x, perm, node="PermuteBackward0"):
    """The view of tensor ``x`` with its axes in the order ``perm`` (checked), recorded as ``node``."""
    return transpose_p.bind(x, node=node, perm=tuple(perm), inverse=tuple(int(i) for i in np.argsort(perm)))


permute = public(("permute", shape_args), name="permute")(transpose)


def _perm(axes, ndim):
    axes = tuple(axes)
    if len(axes) != ndim:
        raise RuntimeError("permute(sparse_coo): number of dimensions in the tensor input does not match the length "
                           f"of the desired ordering of dimensions i.e. input.dim() = {ndim} is not equal to "
                           f"len(dims) = {len(axes)}")
    perm = tuple(norm_axis(a, ndim) for a in axes)
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return perm


@public("swapaxes")
def swapaxes(x, axis1, axis2):
    """``x`` with axes ``axis1`` and ``axis2`` exchanged (NumPy's and torch's ``swapaxes``)."""
    x = as_tensor(x)
    perm = list(range(x.ndim))
    axis1, axis2 = norm_axis(axis1, x.ndim), norm_axis(axis2, x.ndim)
    if x.ndim:  # (a 0-d tensor takes dims 0 and -1, as torch's, and stays itself)
        perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return permuted(x, perm, "TransposeBackward0")


def _move(x, source, destination, numpy):
    """``x`` with axes ``source`` moved to ``destination``, the others keeping their order: a view
    (PermuteBackward0); NumPy's errors (``numpy``) or torch's."""
    x = as_tensor(x)
    src = (source,) if isinstance(source, (int, np.integer)) else tuple(source)
    dst = (destination,) if isinstance(destination, (int, np.integer)) else tuple(destination)
    if len(src) != len(dst):
        if numpy:
            raise ValueError("`source` and `destination` arguments must have the same number of elements")
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should contain "
                           f"the same number of dims as destination ({list(dst)} dims)")
    src, dst = [norm_axis(a, x.ndim) for a in src], [norm_axis(a, x.ndim) for a in dst]
    for what, given, axes in (("source", source, src), ("destination", destination, dst)):
        if len(set(axes)) != len(axes):
            raise (ValueError(f"repeated axis in `{what}` argument") if numpy else
                   RuntimeError(f"movedim: repeated dim in `{what}` ({list(given)})"))
    if not x.ndim:  # (dims 0 and -1 name the one position of a 0-d tensor: torch's alias of it)
        from .indexing import getitem  # indexing imports this module
        return getitem(x, Ellipsis)
    perm = [i for i in range(x.ndim) if i not in src]
    for d, a in sorted(zip(dst, src)):
        perm.insert(d, a)
    return transpose(x, perm)


@public()
def moveaxis(x, source, destination):
    """``x`` with axes ``source`` (an int or a sequence) moved to positions ``destination``, the
    others keeping their order (NumPy's ``moveaxis``, with its errors): a view."""
    return _move(x, source, destination, numpy=True)


@public("movedim", "moveaxis")
def movedim(x, source, destination):
    """torch's ``movedim`` (``Tensor.movedim``, ``Tensor.moveaxis``): NumPy's ``moveaxis`` with
    torch's errors; a view."""
    return _move(x, source, destination, numpy=False)


@public("unflatten")
def unflatten(x, dim, sizes):
    """torch's ``unflatten``: axis ``dim`` split into axes of ``sizes`` (one may be -1), a view."""
    x = as_tensor(x)
    dim = norm_axis(dim, x.ndim)
    return reshape(x, x.shape[:dim] + tuple(sizes) + x.shape[dim + 1:])


def _sum_to(g, shape):
    from .reductions import sum_to  # reductions import this module

    return sum_to(g, shape)


def _kept(a, shape, chunks):
    """``a`` with its kept axes on the target ``chunks``: dask's broadcast_to sets only the chunks of
    new and size-1 axes."""
    if chunks is None:
        return a
    lead = len(shape) - a.ndim
    want = tuple(c if a.shape[i] != 1 or shape[lead + i] == 1 else a.chunks[i] for i, c in enumerate(chunks[lead:]))
    return a if want == a.chunks else a.rechunk(want)


def _expand_layout(x_shape, x_strides, x_offset, out_shape, *, shape, chunks, old):
    """torch's ``inferExpandGeometry``: a broadcast axis has stride 0 (its elements share memory)."""
    nd, lead = len(out_shape), len(out_shape) - len(x_shape)
    strides = [0] * nd
    for i in range(nd - 1, -1, -1):
        d = i - lead
        size = x_shape[d] if d >= 0 else 1
        stride = x_strides[d] if d >= 0 else (out_shape[i + 1] * strides[i + 1] if i + 1 < nd else 1)
        strides[i] = 0 if size != out_shape[i] else stride
    return tuple(strides), x_offset


def _expand_put(a, new, *, shape, chunks, old):
    """A write through an expanded view (only ``fill_``/``zero_`` may: the same value everywhere) puts
    one of the copies of each element."""
    lead = new.ndim - len(old)
    return new[(0,) * lead + tuple(slice(0, 1) if n == 1 and m != 1 else slice(None)
                                   for n, m in zip(old, new.shape[lead:]))]


def _expand_gather(a, new, written, *, shape, chunks, old):
    """The copies ``written`` of an expanded view put back (each element is written at most once:
    torch refuses a write to a part of the view that reads an element twice)."""
    lead = new.ndim - len(old)
    axes = tuple(range(lead)) + tuple(lead + i for i, (n, m) in enumerate(zip(old, new.shape[lead:]))
                                      if n == 1 and m != 1)
    front = (0,) * lead
    hit = written.any(axis=axes, keepdims=True)[front]
    value = da.where(written, new, 0).sum(axis=axes, keepdims=True, dtype=new.dtype)[front]
    return da.where(hit, value, a), hit


broadcast_to_p = primitive("broadcast_to", torch="ExpandBackward0",
                           impl=lambda a, *, shape, chunks, old: _unknown.broadcast_to(_kept(a, shape, chunks), shape,
                                                                                       chunks=chunks),
                           view=View(_expand_layout, _expand_put, _expand_gather))
broadcast_to_p.vjp(lambda g, s, *, shape, chunks, old: (_sum_to(g, old),))


def _expand_method(broadcast_to):
    """torch's ``x.expand(*sizes)``: a new view, ``ExpandBackward0``, even where it expands nothing (a hook
    on it sees its gradient only; ``daskgrad.broadcast_to`` gives ``x`` back there, as a rule wants)."""
    def expand(self, *shape):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        out = broadcast_to(self, shape)
        return out if out is not self else broadcast_to_p.bind(self, shape=self.shape, chunks=None, old=self.shape)
    expand.__wrapped__ = broadcast_to
    return expand


@public("broadcast_to", ("expand", _expand_method))
def broadcast_to(x, shape, chunks=None):
    """Broadcast with NumPy rules; ``chunks`` sets the chunks of the new and size-1 axes."""
    x = as_tensor(x)
    shape, old = tuple(shape), x.shape
    lead = len(shape) - len(old)
    if lead < 0:
        raise RuntimeError(f"expand({type_repr(x.dtype)}{{{list(old)}}}, size={list(shape)}): the number of sizes "
                           f"provided ({len(shape)}) must be greater or equal to the number of dimensions in the "
                           f"tensor ({len(old)})")
    for i in range(len(shape) - 1, -1, -1):  # torch's checks, in its order: from the last dimension
        n, want = (old[i - lead] if i >= lead else 1), shape[i]
        if want == -1 and i < lead:
            raise RuntimeError(f"The expanded size of the tensor (-1) isn't allowed in a leading, non-existing "
                               f"dimension {i}")
        if want != -1 and n != 1 and n == n and want != n:
            raise RuntimeError(f"The expanded size of the tensor ({want}) must match the existing size ({n}) at "
                               f"non-singleton dimension {i}.  Target sizes: {list(shape)}.  Tensor sizes: "
                               f"{list(old)}")
    shape = shape[:lead] + tuple(n if m == -1 else m for n, m in zip(old, shape[lead:]))  # torch: -1 keeps a size
    if shape == old:  # nothing to broadcast: at most a rechunk, no ExpandBackward0
        if chunks is None:
            return x
        lead = len(shape) - x.ndim
        want = tuple(c if x.shape[i] != 1 or shape[lead + i] == 1 else x.chunks[i]
                     for i, c in enumerate(tuple(chunks)[lead:]))
        if tuple(chunks) == want:
            return x if want == x.chunks else rechunk(x, want)
    return broadcast_to_p.bind(x, shape=shape, chunks=chunks, old=old)


def _unsqueeze_layout(x_shape, x_strides, x_offset, out_shape, *, axes):
    shape, strides = list(x_shape), list(x_strides)
    for a in sorted(axes):  # torch's unsqueeze: the new axis steps over the axis it lands before
        strides.insert(a, shape[a] * strides[a] if a < len(shape) else 1)
        shape.insert(a, 1)
    return tuple(strides), x_offset


def _squeeze_layout(x_shape, x_strides, x_offset, out_shape, *, axes):
    return tuple(s for i, s in enumerate(x_strides) if i not in axes), x_offset


def _expand_dims_array(a, axes):
    if any(n != n for n in a.shape):  # (an unknown length, after a boolean mask: dask's reshapes need it)
        shape = list(a.shape)
        for ax in sorted(axes):
            shape.insert(ax, 1)
        return _unknown_reshape(a, tuple(shape))
    return da.expand_dims(a, axes)


expand_dims_p = primitive("expand_dims", torch="UnsqueezeBackward0",
                          impl=lambda a, *, axes: _expand_dims_array(a, axes),
                          view=View(_unsqueeze_layout, lambda a, new, *, axes: da.squeeze(new, axis=axes)))
expand_dims_p.vjp(lambda g, s, *, axes: (squeeze(g, axes),))
# torch names its node by the form: squeeze() SqueezeBackward0, squeeze(dim) 1, squeeze(dims) 2
squeeze_p = primitive("squeeze", torch=("SqueezeBackward1", "SqueezeBackward0", "SqueezeBackward2"),
                      impl=lambda a, *, axes: da.squeeze(a, axis=axes),
                      view=View(_squeeze_layout, lambda a, new, *, axes: _expand_dims_array(new, axes)))
squeeze_p.vjp(lambda g, s, *, axes: (expand_dims(g, axes),))


@public("expand_dims")
def expand_dims(x, axis):
    """``x`` with length-1 axes inserted at ``axis`` (an int or a tuple; NumPy's ``expand_dims``, torch's
    ``unsqueeze``)."""
    x = as_tensor(x)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = norm_axes(axes, x.ndim + len(axes))
    return expand_dims_p.bind(x, axes=axes)


unsqueeze = public("unsqueeze", name="unsqueeze")(expand_dims)


@public()
def squeeze(x, axis=None):
    """``x`` without its length-1 axes, or those of ``axis`` (NumPy's ``squeeze``: an axis whose length is
    not 1 raises ValueError, where torch leaves it)."""
    x = as_tensor(x)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = norm_axes(axis, x.ndim)
    if not axes:
        return x
    if any(x.shape[a] != 1 for a in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return squeeze_p.bind(x, axes=axes)


rechunk_p = primitive("rechunk", torch="RechunkBackward0", impl=lambda a, *, chunks, old: _unknown.rechunk(a, chunks))
rechunk_p.vjp(lambda g, s, *, chunks, old: (rechunk(g, old),))
flip_p = primitive("flip", torch="FlipBackward0", impl=lambda a, *, axes: _unknown.flip(a, axes))
flip_p.vjp(lambda g, s, *, axes: (flip(g, axes),))
def _roll_array(a, *, shift, axis):
    if axis is None:  # (flattened: dask's)
        return da.roll(a, shift, axis)
    total = {}
    for s, ax in np.broadcast(shift, axis):  # (NumPy's: shifts on one axis add up)
        total[int(ax)] = total.get(int(ax), 0) + int(s)
    for ax, s in list(total.items()):  # an axis of unknown lengths (rows after a boolean mask): its blocks joined,
        if _unknown.unknown(a, ax):  # rolled and cut back into them; the others as chunks of known lengths
            a = _unknown.along_one_block(_roll_block, a, ax, shift=s, axis=ax)
            del total[ax]
    return door.rolled(a, tuple(total.values()), tuple(total)) if total else a  # the chunks kept


def _roll_block(b, shift, axis):
    return np.roll(b, shift, axis)


roll_p = primitive("roll", torch="RollBackward0", impl=_roll_array)
roll_p.vjp(lambda g, s, *, shift, axis: (roll(g, tuple(-n for n in shift) if isinstance(shift, tuple) else -shift,
                                              axis),))


# an axis of unknown lengths (rows after a boolean mask) joined into one block, and cut back into a tensor's blocks
join_p = primitive("join_blocks", torch="RechunkBackward0", impl=lambda a, *, axis: _unknown.one_block(a, axis),
                   save=("x",))
split_like_p = primitive("split_like", torch="RechunkBackward0",
                         impl=lambda g, like, *, axis: _unknown.split_like(g, like, axis), args=("g", "like"),
                         consts=("like",))
join_p.vjp(lambda g, s, *, axis: (split_like_p.bind(g, s.x, axis=axis),))
split_like_p.vjp(lambda g, s, *, axis: (join_p.bind(g, axis=axis),))


def _join_unknown(x, chunks):
    """``x`` with its axes of unknown lengths that ``chunks`` asks to be one chunk (-1) joined block by block, and
    ``chunks`` for the rest; None when no such axis."""
    if isinstance(chunks, dict):
        spec = {k % x.ndim: v for k, v in chunks.items()}
    elif isinstance(chunks, (tuple, list)) and len(chunks) == x.ndim:
        spec = dict(enumerate(chunks))
    else:
        return None
    axes = [k for k, v in spec.items() if x.shape[k] != x.shape[k] and len(x.chunks[k]) > 1
            and ((isinstance(v, int) and v == -1) or (isinstance(v, tuple) and len(v) == 1))]
    if not axes:
        return None
    for k in axes:
        x = join_p.bind(x, axis=k)
        del spec[k]
    return x, {k: v for k, v in spec.items() if v != x.chunks[k]}


@public("rechunk")
def rechunk(x, chunks):
    """The same values in other chunks (dask's ``rechunk``; torch has no chunks); the gradient goes back
    in the old chunks.  An axis of unknown lengths (rows after a boolean mask) asked to be one chunk (-1) has
    its blocks joined (and the gradient cut back into them), without their lengths."""
    x = as_tensor(x)
    joined = _join_unknown(x, chunks) if any(n != n for n in x.shape) else None
    if joined is not None:
        x, chunks = joined
        if not chunks:
            return x
    return rechunk_p.bind(x, chunks=chunks, old=x.chunks)


@public()
def flip(x, axis=None):
    """``x`` reversed along ``axis``, every axis when None (NumPy's ``flip``; torch's ``flip`` requires
    ``dims``)."""
    x = as_tensor(x)
    axes = norm_axes(axis, x.ndim)
    return flip_p.bind(x, axes=axes)


@public("roll")
def roll(x, shift, axis=None):
    """``x`` shifted by ``shift`` along ``axis``, wrapping around; flattened first when ``axis`` is None
    (NumPy's and torch's ``roll``)."""
    x = as_tensor(x)
    shift = tuple(shift) if isinstance(shift, (tuple, list)) else shift
    if axis is not None:
        axis = (tuple(norm_axis(a, x.ndim) for a in axis) if isinstance(axis, (tuple, list))
                else norm_axis(axis, x.ndim))
    return roll_p.bind(x, shift=shift, axis=axis)


# ------------------------------------------------------------ joining, splitting
def _getitem(x, index):
    from .indexing import getitem  # indexing imports this module

    return getitem(x, index)


concatenate_p = primitive("concatenate", torch="CatBackward0", promote="common",  # (torch's dtype: cat's)
                          impl=lambda *arrays, axis, bounds: _concatenate_array(arrays, axis))


def _concatenate_array(arrays, axis):
    """dask's ``concatenate``; where another axis has unknown lengths (rows after a boolean mask, the same rows in
    each: ``column_stack`` of two masked columns), block by block along it (dask's refuses unless told)."""
    unknown_off_axis = any(_unknown.unknown(a, [k for k in range(a.ndim) if k != axis]) for a in arrays)
    return da.concatenate(list(arrays), axis=axis, allow_unknown_chunksizes=unknown_off_axis)


@concatenate_p.vjp
def _concatenate_rule(g, s, *, axis, bounds):
    if bounds[0] != "blocks":
        return tuple(_getitem(g, (slice(None),) * axis + (slice(lo, hi),)) for lo, hi in zip(bounds[:-1], bounds[1:]))
    if g.requires_grad:
        raise NotImplementedError("a second derivative through cat of tensors whose lengths are not known until "
                                  "computed (after a boolean mask: dask's unknown chunk sizes) is not supported")
    bounds = bounds[1:]  # (the blocks of each input along axis: its lengths are unknown, its blocks are not)
    return tuple(Tensor._make(g.array.blocks[(slice(None),) * axis + (slice(lo, hi),)])
                 for lo, hi in zip(bounds[:-1], bounds[1:]))
stack_p = primitive("stack", torch="StackBackward0", impl=lambda *arrays, axis, n: da.stack(list(arrays), axis=axis),
                    promote="common")
stack_p.vjp(lambda g, s, *, axis, n: tuple(_getitem(g, (slice(None),) * axis + (i,)) for i in range(n)))


@public()
def concatenate(tensors, axis=0):
    """Tensors joined along an existing ``axis`` (NumPy's ``concatenate``, torch's ``cat``); their shapes
    must agree off that axis."""
    ts = [as_tensor(t) for t in tensors]
    for k, t in enumerate(ts):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {k}) cannot be concatenated")
    axis = norm_axis(axis, ts[0].ndim)
    for k, t in enumerate(ts[1:], 1):
        for d in range(ts[0].ndim):
            if d != axis and (t.ndim != ts[0].ndim or t.shape[d] != ts[0].shape[d]
                              and not (t.shape[d] != t.shape[d] and ts[0].shape[d] != ts[0].shape[d])):
                if t.ndim != ts[0].ndim:
                    raise RuntimeError(f"Tensors must have same number of dimensions: got {ts[0].ndim} and {t.ndim}")
                raise RuntimeError(f"Sizes of tensors must match except in dimension {axis}. Expected size "
                                   f"{ts[0].shape[d]} but got size {t.shape[d]} for tensor number {k} in the list.")
    if any(t.shape[axis] != t.shape[axis] for t in ts):  # (an unknown length, after a boolean mask: each input's
        # part of the gradient is its own blocks of it)
        bounds = tuple(int(b) for b in np.cumsum([0] + [t.array.numblocks[axis] for t in ts]))
        return concatenate_p.bind(*ts, axis=axis, bounds=("blocks",) + bounds)
    bounds = tuple(int(b) for b in np.cumsum([0] + [t.shape[axis] for t in ts]))
    return concatenate_p.bind(*ts, axis=axis, bounds=bounds)


@public()
def stack(tensors, axis=0):
    """Tensors of one shape joined along a new ``axis`` (NumPy's and torch's ``stack``)."""
    ts = [as_tensor(t) for t in tensors]
    axis = norm_axis(axis, ts[0].ndim + 1)
    for k, t in enumerate(ts[1:], 1):
        if t.shape != ts[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(ts[0].shape)} at entry 0 "
                               f"and {list(t.shape)} at entry {k}")
    return stack_p.bind(*ts, axis=axis, n=len(ts))


@public()
def split(x, indices_or_sections, axis=0):
    """NumPy's ``split``: a list of slices, each its own differentiable op."""
    x = as_tensor(x)
    axis = norm_axis(axis, x.ndim)
    n = x.shape[axis]
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        cuts = list(range(step, n, step))
    else:
        cuts = list(indices_or_sections)
    edges = [0] + cuts + [n]
    pre = (slice(None),) * axis
    return [_getitem(x, pre + (slice(lo, hi),)) for lo, hi in zip(edges[:-1], edges[1:])]


pad_p = primitive("pad", torch="ConstantPadNdBackward0", impl=lambda a, *, widths, constant_values, index: da.pad(
    a, widths, mode="constant", constant_values=constant_values))
pad_p.vjp(lambda g, s, *, widths, constant_values, index: (_getitem(g, index),))


@public()
def pad(x, pad_width, mode="constant", constant_values=0):
    """Constant padding (NumPy's ``pad_width``); the rule slices the padding off."""
    if mode != "constant":
        raise NotImplementedError("only mode='constant' is differentiable")
    x = as_tensor(x)
    widths = np.broadcast_to(np.array(pad_width, dtype=int), (x.ndim, 2))  # NumPy's pad_width forms
    index = tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, x.shape))
    return pad_p.bind(x, widths=tuple(tuple(int(v) for v in w) for w in widths), constant_values=constant_values,
                      index=index)


@public()
def diff(x, n=1, axis=-1, prepend=None, append=None):
    """NumPy's ``diff``: the ``n``-th differences along ``axis``, after joining ``prepend``/``append``
    (a number or a tensor, broadcast to one slice along ``axis``, as NumPy's)."""
    x = as_tensor(x)
    axis = norm_axis(axis, x.ndim)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"diff(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    pre = (slice(None),) * axis
    if prepend is not None or append is not None:
        parts = [_edge(v, x, axis) for v in (prepend,) if v is not None] + [x]
        x = concatenate(parts + [_edge(v, x, axis) for v in (append,) if v is not None], axis=axis)
    for _ in range(n):
        a, b = _getitem(x, pre + (slice(1, None),)), _getitem(x, pre + (slice(None, -1),))
        x = a - b if x.dtype != bool else a != b  # (of bools: whether they differ, NumPy's and torch's)
    return x


def _edge(v, x, axis):
    """``prepend``/``append`` as NumPy takes them: a number or 0-d value becomes one slice along
    ``axis`` (a constant made on ``x``'s chunk type), a tensor of ``x``'s rank joins as it is."""
    from .elementwise import full_like  # elementwise's where and full_like are below this floor

    one = _getitem(x, (slice(None),) * axis + (slice(0, 1),))
    if isinstance(v, Tensor) or np.ndim(v):
        v = as_tensor(v)
        return v if v.ndim == x.ndim else broadcast_to(v, one.shape)
    return full_like(one, v, dtype=np.result_type(x.dtype, np.asarray(v)))  # (NumPy: 1 joins as an int64 array)
