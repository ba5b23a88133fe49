"""torch's older and rarer Tensor methods: the legacy ``type()`` and ``new()``, the deprecated linear algebra
methods (``qr``, ``svd``, ``lu``, ``lu_solve``, ``geqrf``, ``orgqr``, ``ormqr``), the ``unsafe_`` splits, the
Python-callable fills ``apply_``/``map_``, ``resize_``/``resize_as_``, and torch's answers about memory
(``is_pinned``, ``is_shared``, ``dim_order``, ``output_nr``).  Each follows torch 2.13 (names, defaults, named
results, errors); where daskgrad cannot (a lazy callable runs in its chunk's task, not at the call), the
docstring says so.  Installed on :class:`~daskgrad.Tensor` by ``daskgrad/ops/__init__.py`` after
:mod:`.methods`; tests/test_tensor_methods_2.py checks each against torch.

Not here, on purpose: torch's sparse, quantized and device-specific methods (``to_sparse``, ``indices``,
``q_scale``, ``xpu``, ``record_stream`` ...), which raise AttributeError; ``data_ptr``/``const_data_ptr``
(a chunked lazy array has no one address); ``as_strided`` (daskgrad's views are recipes of view ops over
their base's value, and an arbitrary strided window over the base's memory has no such op or gradient yet).
"""
from __future__ import annotations

import numbers
import warnings
import weakref

import dask.array as da
import numpy as np

from .. import _data, _state, return_types
from ..graph import guard, mark, named, primitive, relabel
from .._modes import is_grad_enabled
from .._tensor import Tensor, _ViewStorage, require_cuda, tensor, zeros
from .elementwise import clone
from .linalg import _geqrf, householder_product, qr as linalg_qr, svd as linalg_svd
from .products import matmul
from .reductions import sum
from .shape import broadcast_to, pad, rechunk, reshape
from .triangular import lu_factor_ex, lu_solve as linalg_lu_solve

# torch's names of its tensor types (``torch.FloatTensor``), by NumPy dtype name
TYPE_NAMES = {**_data.TORCH_TYPE_NAMES, "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64"}
# torch's types NumPy has no dtype for: refused as daskgrad refuses their dtypes (NumPy's TypeError)
_NO_NUMPY = {"BFloat16": "bfloat16", "ComplexHalf": "complex32"}
_BY_NAME = {name: dtype for dtype, name in TYPE_NAMES.items()} | _NO_NUMPY


def _dtype_of_name(name):
    """The NumPy dtype of torch's type name (``Float``); NumPy's TypeError for torch's types it lacks."""
    return _data.np_dtype(_BY_NAME[name])


# ------------------------------------------------------------------ type() and new()
def _type(self, dtype=None, non_blocking=False, **kwargs):
    """torch's ``type(dtype=None, non_blocking=False)``: without ``dtype`` torch's name of this tensor's type
    (``'torch.FloatTensor'``; ``'torch.cuda.FloatTensor'`` for cupy chunks); with a dtype, or a type's name
    (``'torch.IntTensor'``, ``'torch.cuda.DoubleTensor'``, or torch's class ``torch.IntTensor``), the tensor
    cast to it (and moved, for a name of the other device): itself when nothing changes, differentiable
    as ``to()``.  ``bfloat16`` and ``complex32`` types raise NumPy's TypeError (NumPy has no such dtypes)."""
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"type() got an unexpected keyword argument '{list(kwargs)[-1]}'")
    if dtype is None:
        return f"torch.{'cuda.' if self.is_cuda else ''}{TYPE_NAMES.get(self.dtype.name, self.dtype.name)}Tensor"
    if isinstance(dtype, type) and dtype.__name__.endswith("Tensor") and dtype.__module__ in ("torch", "torch.cuda"):
        dtype = f"{dtype.__module__}.{dtype.__name__}"  # (torch's legacy classes: torch.IntTensor)
    if isinstance(dtype, str):
        module, _, name = dtype.rpartition(".")
        kind = name[:-len("Tensor")] if name.endswith("Tensor") else None
        if module not in ("torch", "torch.cuda", "daskgrad", "daskgrad.cuda") or kind not in _BY_NAME:
            raise ValueError(f"invalid type: {dtype!r}")
        device = "cuda" if module.endswith(".cuda") else "cpu"
        return self.to(device=device, dtype=_dtype_of_name(kind), non_blocking=non_blocking)
    if _data.package(dtype) != "torch":
        try:
            dtype = _data.np_dtype(dtype)
        except TypeError:
            raise TypeError("dtype must be a type, str, or dtype object") from None
    return self.to(dtype=dtype, non_blocking=non_blocking)


def _invalid_new(args, kwargs):
    def name(v):
        return "torch.dtype" if isinstance(v, np.dtype) or _data.package(v) == "torch" else type(v).__name__
    got = ", ".join([name(a) for a in args] + [f"{k}={name(v)}" for k, v in kwargs.items()])
    return TypeError(
        f"new() received an invalid combination of arguments - got ({got}), but expected one of:\n"
        " * (*, torch.device device = None)\n      didn't match because some of the keywords were incorrect: "
        f"{', '.join(kwargs)}\n * (torch.Storage storage)\n * (Tensor other)\n"
        " * (tuple of ints size, *, torch.device device = None)\n * (object data, *, torch.device device = None)\n")


def _new(self, *args, device=None, **kwargs):
    """torch's legacy constructor ``new(*sizes)``, ``new(data)``, ``new(other)``, ``new()``, of this tensor's
    dtype (and device unless ``device`` is given): sizes give a new tensor of zeros (torch's is uninitialized
    memory, whose values no program may read), ``data`` (a list, an array, a number in a sequence) a copy of
    it in this dtype, another tensor of the same dtype an alias of it (a view sharing its storage, as
    torch's), nothing an empty tensor.  Other keywords (``dtype=``, ``requires_grad=``) raise torch's
    TypeError: use ``new_zeros``/``new_tensor``."""
    if kwargs:
        raise _invalid_new(args, kwargs)
    device = self.device if device is None else device
    if not args:
        return zeros(0, dtype=self.dtype, device=device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        other = args[0]
        if other.dtype != self.dtype:
            raise TypeError(f"expected {_options(self.dtype)} (got {_options(other.dtype)})")
        return other[...]
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        if any(a < 0 for a in args):
            raise RuntimeError(f"Trying to create tensor with negative dimension {min(args)}: {list(args)}")
        return zeros(*args, dtype=self.dtype, device=device)
    if len(args) > 1:
        raise _invalid_new(args, kwargs)
    data = args[0]
    if isinstance(data, str):
        raise TypeError("new(): invalid data type 'str'")
    if isinstance(data, numbers.Number):
        raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
    return tensor(data, dtype=self.dtype, device=device)


_CPP_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "int64": "long int", "int32": "int",
              "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool",
              "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}


def _options(dtype):
    return (f"TensorOptions(dtype={_CPP_NAMES.get(dtype.name, dtype.name)}, device=cpu, layout=Strided, "
            "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))")


def _to_dense(self, dtype=None, *, masked_grad=True):
    """torch's ``to_dense(dtype=None)`` of a dense tensor: itself (cast to ``dtype`` when given, as ``to``)."""
    return self if dtype is None else self.to(dtype)


def _dtype_cast(name):
    def method(self, memory_format=None):
        return self.to(_data.np_dtype(name))
    method.__doc__ = (f"torch's cast to ``{name}``: NumPy has no such dtype, so it raises NumPy's TypeError "
                      f"(``data type '{name}' not understood``), as every daskgrad call given ``torch.{name}`` "
                      "does.")
    return method


# ------------------------------------------------------------------ layout facts
def _output_nr(self):
    return self._view.creation[0] if self._view is not None and type(self._view.creation) is tuple else 0


def _is_contiguous_in(shape, strides, order):
    """Whether the elements are dense with dims laid out outermost to innermost in ``order`` (size-1 dims aside)."""
    if any(n == 0 for n in shape):
        return True
    want = 1
    for d in reversed(order):
        if shape[d] != 1:
            if strides[d] != want:
                return False
            want *= shape[d]
    return True


_FORMAT_ORDERS = {"contiguous_format": lambda n: tuple(range(n)),
                  "channels_last": lambda n: (0, 2, 3, 1) if n == 4 else None,
                  "channels_last_3d": lambda n: (0, 2, 3, 4, 1) if n == 5 else None}


def _should_swap(shape, strides, a, b):
    """torch's comparison of two dims by stride (``compute_elementwise_output_logical_to_physical_perm``)."""
    def ge(x, y):
        return True if y == 0 else False if x == 0 else x >= y or x % y == 0
    sa, sb = strides[a], strides[b]
    if sa == 0 or sb == 0:
        return 0
    if sa == sb:
        return 0 if ge(shape[b], shape[a]) else 1
    return -1 if ge(sb, sa) else 1 if ge(sa, sb) else 0


def _dim_order(self, *, ambiguity_check=False):
    """torch's ``dim_order(ambiguity_check=False)``: the dims from outermost to innermost in memory, read from
    torch's strides (:meth:`stride`: a view's over its base; an op's result is C-contiguous here).
    ``ambiguity_check`` True (or a list of memory formats) raises torch's RuntimeError where the order is not
    unique (a size-1 dim, equal strides) and the layout is not exactly one of the formats."""
    formats = ambiguity_check if isinstance(ambiguity_check, list) else []
    if not isinstance(ambiguity_check, (bool, list)) or any(not isinstance(f, _data.memory_format)
                                                             for f in formats):
        raise TypeError("The ambiguity_check argument must be a bool or a list of memory formats.")
    shape, strides, n = tuple(self.shape), tuple(self.stride()), self.ndim
    check = ambiguity_check if isinstance(ambiguity_check, bool) else True
    several = any(a == b for a, b in zip(strides, strides[1:])) or any(s == 1 for s in shape)
    legal = [f for f in formats if (order := _FORMAT_ORDERS.get(str(f).removeprefix("daskgrad."), lambda n: None)(n))
             is not None and _is_contiguous_in(shape, strides, order)]
    if check and several and len(legal) != 1:
        raise RuntimeError("The tensor does not have unique dim order, or cannot map to exact one of the given "
                           "memory formats.")
    if n <= 1:
        return tuple(range(n))
    contiguous = _is_contiguous_in(shape, strides, tuple(range(n)))
    last = _FORMAT_ORDERS["channels_last"](n) or _FORMAT_ORDERS["channels_last_3d"](n)
    channels_last = last is not None and _is_contiguous_in(shape, strides, last)
    if contiguous and not channels_last:
        return tuple(range(n))
    if channels_last and not contiguous:
        return tuple(last)
    perm = list(reversed(range(n)))
    for i in range(1, n):
        d1 = i
        for d0 in reversed(range(i)):
            c = _should_swap(shape, strides, perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    if ambiguity_check and any(_should_swap(shape, strides, perm[i], perm[i + 1]) != -1 for i in range(n - 1)):
        raise RuntimeError("The tensor does not have unique dim order.")
    return tuple(reversed(perm))


# ------------------------------------------------------------------ memory
_SHARED = weakref.WeakSet()  # the storages share_memory_() was called on


def _root_storage(t):
    st = t._storage
    return st.root if type(st) is _ViewStorage else st


def _is_shared(self):
    """torch's ``is_shared()``: True for cupy chunks (torch's CUDA tensors) and after :meth:`share_memory_`,
    else False."""
    return self.is_cuda or _root_storage(self) in _SHARED


def _share_memory_(self):
    """torch's ``share_memory_()``: marks the storage shared (``is_shared()`` is then True) and returns this
    tensor; nothing moves, as dask's workers already pass chunks between processes."""
    _SHARED.add(_root_storage(self))
    return self


_DEVICE_ARG = "The argument 'device' of Tensor.{}() is deprecated. Please do not pass this argument."


def _is_pinned(self, device=None):
    """torch's ``is_pinned()``: False (daskgrad never pins host memory); ``device`` warns, as torch's."""
    if device is not None:
        warnings.warn(_DEVICE_ARG.format("is_pinned"), DeprecationWarning, stacklevel=2)
    return False


def _pin_memory(self, device=None):
    """torch's ``pin_memory()``: without a GPU torch's RuntimeError (``Cannot access accelerator device when
    none is available.``); with one, a copy of host chunks (not page-locked: dask's chunks are NumPy's);
    of cupy chunks torch's refusal."""
    if device is not None:
        warnings.warn(_DEVICE_ARG.format("pin_memory"), DeprecationWarning, stacklevel=2)
    try:
        require_cuda()
    except (AssertionError, RuntimeError):  # (no cupy, or no GPU it sees: daskgrad.cuda.is_available() False)
        raise RuntimeError("Cannot access accelerator device when none is available.") from None
    if self.is_cuda:
        raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
    return clone(self)


# ------------------------------------------------------------------ in-place Python callables
def _element(v, dtype):
    """A Python callable's result as an element of ``dtype``, with torch's conversion errors."""
    kind = dtype.kind
    if kind == "b":
        return bool(v)
    if kind == "c":
        if not isinstance(v, numbers.Complex):
            raise TypeError(f"must be real number, not {type(v).__name__}")
        return complex(v)
    if kind == "f":
        if not isinstance(v, numbers.Real):
            raise TypeError(f"must be real number, not {type(v).__name__}")
        return float(v)
    if not isinstance(v, numbers.Real):
        raise TypeError(f"'{type(v).__name__}' object cannot be interpreted as an integer")
    info = np.iinfo(dtype)
    if v != v or not info.min <= v <= info.max:
        raise RuntimeError(f"value cannot be converted to type {dtype.name} without overflow")
    return int(v)


def _apply_block(*blocks, fn, out_dtype):
    out = np.empty(blocks[0].shape, out_dtype)
    flat = out.reshape(-1)
    for i, values in enumerate(zip(*(b.reshape(-1).tolist() for b in blocks))):
        flat[i] = _element(fn(*values), out_dtype)
    return out


def _callable_write(self, name, fn, others):
    """``self`` written in place with ``fn`` of its elements (and ``others``', broadcast to its shape), chunk
    by chunk in the tasks, torch's checks first."""
    if any(t.requires_grad for t in (self, *others)):
        raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() instead.")
    if self.is_cuda:
        raise TypeError(f"{name} is only implemented on CPU tensors")
    if not callable(fn):
        raise TypeError(f"'{type(fn).__name__}' object is not callable")
    arrays = [self.detach().array] + [o.detach().expand(self.shape).array.rechunk(self.chunks) for o in others]

    def write(x):
        return Tensor._make(da.map_blocks(_apply_block, *arrays, fn=fn, out_dtype=self.dtype, dtype=self.dtype,
                                          meta=np.empty((0,) * self.ndim, self.dtype)))
    return self._inplace(write)


def _apply_(self, callable):
    """torch's ``apply_(callable)``: each element replaced by ``callable(element)`` (a Python number in,
    converted to this dtype as torch converts it), in place; host chunks only, and not on a tensor that
    requires grad (torch's errors).  Unlike torch, the callable runs lazily, in each chunk's task (it must
    pickle, as dask's tasks do; its errors come when the tensor is computed), and the version counter goes
    up (torch's ``apply_`` leaves it; daskgrad's views read it to see the write)."""
    return _callable_write(self, "apply_", callable, ())


def _map_(self, tensor, callable):
    """torch's ``map_(tensor, callable)``: each element replaced by ``callable(element, other)`` with
    ``tensor``'s element at the same place (``tensor`` of the same dtype, broadcast to this shape), in place,
    as :meth:`apply_` (lazy, in the chunks' tasks; the version counter goes up)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"map_(): argument 'other' (position 1) must be Tensor, not {type(tensor).__name__}")
    if any(t.requires_grad for t in (self, tensor)):
        raise RuntimeError("Can't call map_() on Variable that requires grad. Use var.detach().map_() instead.")
    if tensor.dtype != self.dtype:
        raise TypeError(f"map_: expected {self.type()} for 'other' (got {tensor.type()})")
    return _callable_write(self, "map_", callable, (tensor,))


def _map2_(self, x, y, callable):
    """torch's ``map2_(x, y, callable)``: each element replaced by ``callable(element, x's, y's)``, as
    :meth:`map_` with two tensors."""
    for i, (arg, t) in enumerate((("x", x), ("y", y)), 1):
        if not isinstance(t, Tensor):
            raise TypeError(f"map2_(): argument '{arg}' (position {i}) must be Tensor, not {type(t).__name__}")
    if any(t.requires_grad for t in (self, x, y)):
        raise RuntimeError("Can't call map2_() on Variable that requires grad. Use var.detach().map2_() instead.")
    for arg, t in (("x", x), ("y", y)):
        if t.dtype != self.dtype:
            raise TypeError(f"map2_: expected {self.type()} for argument '{arg}' (got {t.type()})")
    return _callable_write(self, "map2_", callable, (x, y))


# ------------------------------------------------------------------ resize_
def _sizes(args, name):
    sizes = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
    if not args:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')
    for k, s in enumerate(sizes):
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"{name}(): argument 'size' failed to unpack the object at pos {k + 1} with error "
                            f"\"type must be tuple of ints,but got {type(s).__name__}\"")
    return tuple(int(s) for s in sizes)


def _resize_to(self, sizes, memory_format):
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if any(s < 0 for s in sizes):
        raise RuntimeError("numel: integer multiplication overflow")
    if memory_format is not None and str(memory_format).endswith("channels_last") and len(sizes) != 4:
        raise RuntimeError("required rank 4 tensor to use channels_last format")
    if sizes == tuple(self.shape):
        return self
    st = self._storage
    if type(st) is _ViewStorage or st.views:
        raise NotImplementedError("resize_() of a view, or of a tensor that has views, is not supported: daskgrad's "
                                  "views are recipes over their base's shape")
    self._check_inplace()
    n, have = int(np.prod(sizes)), self.numel()
    flat = reshape(self.detach(), (-1,))
    if n < have:
        flat = flat[:n]
    elif n > have:  # (torch's new elements are uninitialized memory: zeros here)
        flat = pad(flat, (0, n - have))
    new = reshape(flat, sizes) if sizes else reshape(flat, ())
    st.value, st.version = new._storage.value, st.version + 1
    if self.grad_fn is None:  # (a leaf: its new value is due at the next submission, as any in-place write's)
        _state.mark_pending(st)
    return self


def _resize_(self, *sizes, memory_format=None):
    """torch's ``resize_(*sizes)``: this tensor takes the shape ``sizes``, in place, its elements in C order
    kept (those past the old count are zeros here, uninitialized memory in torch's); the same shape leaves it
    as it is.  torch's RuntimeError for a tensor that requires grad; a view, or a tensor others view, raises
    NotImplementedError (their recipes read its shape)."""
    return _resize_to(self, _sizes(sizes, "resize_"), memory_format)


def _resize_as_(self, tensor, memory_format=None):
    """torch's ``resize_as_(tensor)``: :meth:`resize_` to ``tensor``'s shape."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"resize_as_(): argument 'the_template' (position 1) must be Tensor, not "
                        f"{type(tensor).__name__}")
    return _resize_to(self, tuple(tensor.shape), memory_format)


# ------------------------------------------------------------------ unsafe splits
def _unsafe(split, node):
    """``split``'s pieces, each a copy (torch's are not tracked as views: writable, no ``_base``) recorded as
    torch's node ``node``."""
    def method(self, *args, **kwargs):
        since = mark()
        return tuple(relabel(clone(p), node, since) for p in split(self, *args, **kwargs))
    return method


def _unsafe_split_args(self, split_size, dim=0):
    if not isinstance(split_size, numbers.Integral):
        raise TypeError(f"unsafe_split(): argument 'split_size' (position 1) must be int, not "
                        f"{type(split_size).__name__}")
    return self.split(split_size, dim)


_unsafe_chunk = _unsafe(lambda self, chunks, dim=0: self.chunk(chunks, dim), "UnsafeSplitBackward0")
_unsafe_chunk.__doc__ = ("torch's ``unsafe_chunk(chunks, dim=0)``: :meth:`chunk`'s pieces, not views (torch does not "
                         "track them: a write into one is allowed).")
_unsafe_split = _unsafe(_unsafe_split_args, "UnsafeSplitBackward0")
_unsafe_split.__doc__ = ("torch's ``unsafe_split(split_size, dim=0)``: :meth:`split`'s pieces of ``split_size``, not "
                         "views (torch does not track them: a write into one is allowed).")
_unsafe_split_with_sizes = _unsafe(lambda self, split_sizes, dim=0: self.split_with_sizes(split_sizes, dim),
                                   "UnsafeSplitWithSizesBackward0")
_unsafe_split_with_sizes.__doc__ = ("torch's ``unsafe_split_with_sizes(split_sizes, dim=0)``: "
                                    ":meth:`split_with_sizes`'s pieces, not views.")


# ------------------------------------------------------------------ torch's older linear algebra
_DEPRECATED = {
    "qr": "torch.qr is deprecated in favor of torch.linalg.qr and will be removed in a future PyTorch release.\nThe "
          "boolean parameter 'some' has been replaced with a string parameter 'mode'.\nQ, R = torch.qr(A, some)\n"
          "should be replaced with\nQ, R = torch.linalg.qr(A, 'reduced' if some else 'complete')",
    "lu": "torch.lu is deprecated in favor of torch.linalg.lu_factor / torch.linalg.lu_factor_ex and will be removed "
          "in a future PyTorch release.\nLU, pivots = torch.lu(A, compute_pivots)\nshould be replaced with\nLU, "
          "pivots = torch.linalg.lu_factor(A, compute_pivots)\nand\nLU, pivots, info = torch.lu(A, compute_pivots, "
          "get_infos=True)\nshould be replaced with\nLU, pivots, info = torch.linalg.lu_factor_ex(A, "
          "compute_pivots)",
    "lu_solve": "torch.lu_solve is deprecated in favor of torch.linalg.lu_solveand will be removed in a future "
                "PyTorch release.\nNote that torch.linalg.lu_solve has its arguments reversed.\nX = torch.lu_solve(B, "
                "LU, pivots)\nshould be replaced with\nX = torch.linalg.lu_solve(LU, pivots, B)",
}


def _whole_matrices(x):
    """A copy of ``x`` with each matrix in one chunk: LAPACK's factorization of it, whose signs are torch's
    (dask's TSQR of a matrix in several row chunks gives other, equally valid, signs).  A copy, as torch's
    nodes of these methods save their results, not the input: a write into ``x`` before the backward is
    allowed, as torch's (daskgrad's decompositions save the matrix they factor)."""
    if x.ndim >= 2 and (len(x.chunks[-1]) > 1 or len(x.chunks[-2]) > 1):
        return rechunk(x, {x.ndim - 2: -1, x.ndim - 1: -1})
    return clone(x)


def _qr(self, some=True):
    """torch's ``qr(some=True)``: the named tuple ``(Q, R)`` of ``linalg.qr(self, 'reduced' if some else
    'complete')``, with its gradients, each matrix factored in one chunk (LAPACK's, torch's signs;
    ``daskgrad.linalg.qr`` runs dask's TSQR on a tall matrix in several row chunks); deprecated in torch,
    whose warning it gives."""
    warnings.warn(_DEPRECATED["qr"], UserWarning, stacklevel=2)
    mode = "reduced" if some else "complete"
    if 0 in self.shape and self.requires_grad:  # (no element: the factors' gradient is zeros, as torch's)
        zero = sum(self) * 0
        return return_types.qr(*(f + zero for f in linalg_qr(self.detach(), mode)))
    return return_types.qr(*linalg_qr(_whole_matrices(self), mode))


@named("LinalgSvdBackward0")
def _svd(self, some=True, compute_uv=True):
    """torch's ``svd(some=True, compute_uv=True)``: the named tuple ``(U, S, V)``, ``self = U diag(S) V^H``
    (``V``, not ``linalg.svd``'s ``Vh``), reduced unless ``some`` is False; without ``compute_uv`` ``U`` and
    ``V`` are zeros (m x m, n x n) and only ``S`` has a gradient, as torch's.  Each matrix is factored in one
    chunk (LAPACK's, torch's signs; ``daskgrad.linalg.svd`` runs dask's TSQR on a tall matrix in row chunks)."""
    self = _whole_matrices(self)
    if not compute_uv:
        S = linalg_svd(self, full_matrices=False).S
        m, n = self.shape[-2:]
        batch = tuple(self.shape[:-2])
        return return_types.svd(zeros(*batch, m, m, dtype=self.dtype, device=self.device), S,
                                zeros(*batch, n, n, dtype=self.dtype, device=self.device))
    U, S, Vh = linalg_svd(self, full_matrices=not some)
    return return_types.svd(U, S, Vh.mH)


@named("LinalgLuFactorExBackward0")
def _lu_factors(self, pivot):
    return lu_factor_ex(clone(self), pivot=pivot)  # (torch's node saves the factors: the input may be written)


def _lu(self, pivot=True, get_infos=False):
    """torch's ``lu(pivot=True, get_infos=False)``: the plain tuple ``(LU, pivots)`` (and ``infos`` with
    ``get_infos``) of ``linalg.lu_factor_ex``, pivots 1-based int32, ``LU`` with torch's gradient; deprecated
    in torch, whose warning it gives.  A singular matrix is factored as LAPACK factors it (torch raises
    without ``get_infos``)."""
    warnings.warn(_DEPRECATED["lu"], UserWarning, stacklevel=2)
    LU, pivots, infos = _lu_factors(self, pivot)
    return (LU, pivots, infos) if get_infos else (LU, pivots)


@named("LinalgLuSolveBackward0")
def _lu_solve(self, LU_data, LU_pivots):
    """torch's ``lu_solve(LU_data, LU_pivots)``: ``X`` with ``A X = self`` for ``A`` factored by :meth:`lu`,
    with torch's gradients for ``self`` and ``LU_data``; deprecated in torch, whose warning it gives."""
    warnings.warn(_DEPRECATED["lu_solve"], UserWarning, stacklevel=2)
    if self.ndim >= 2 and isinstance(LU_data, Tensor) and LU_data.ndim >= 2:
        batch = np.broadcast_shapes(tuple(self.shape[:-2]), tuple(LU_data.shape[:-2]))
        if 0 in batch:  # (no matrix to solve: the triangular solves refuse an empty batch, torch gives it)
            return broadcast_to(self, batch + tuple(self.shape[-2:])) * 0 + sum(LU_data) * 0
    return linalg_lu_solve(LU_data, LU_pivots, self)


_geqrf_p = primitive("geqrf_no_derivative")


def _refuse_geqrf(g, s):
    raise NotImplementedError("the derivative for 'geqrf' is not implemented.")


_geqrf_p.vjp(_refuse_geqrf)


def _geqrf_method(self):
    """torch's ``geqrf()``: LAPACK's compact QR, the named tuple ``(a, tau)`` (``R`` on and above ``a``'s
    diagonal, the Householder vectors below, their factors in ``tau``).  As torch's, not differentiable: of a
    tensor that requires grad both require grad, and backward through them raises NotImplementedError."""
    a, tau = _geqrf(self)
    if self.requires_grad and is_grad_enabled():
        a, tau = (_geqrf_p.record(t.array, self, node="GeqrfBackward0") for t in (a, tau))
    return return_types.geqrf(a, tau)


@named("LinalgHouseholderProductBackward0")
def _orgqr(self, input2):
    """torch's ``orgqr(input2)``: ``linalg.householder_product(self, input2)``, the first ``n`` columns of
    the product of the Householder reflectors that :meth:`geqrf` gives (``Q``), differentiable."""
    return guard(householder_product(self, input2), self, input2)  # (torch's node saves both)


@named("OrmqrBackward0")
def _ormqr(self, input2, input3, left=True, transpose=False):
    """torch's ``ormqr(input2, input3, left=True, transpose=False)``: ``input3`` multiplied by the full
    ``Q`` of the Householder reflectors in ``self`` (factors ``input2``, as :meth:`geqrf` gives them): ``Q
    input3`` (``Q^H input3`` with ``transpose``; ``input3 Q`` or ``input3 Q^H`` when not ``left``).
    Composed of :func:`daskgrad.linalg.householder_product` on the reflectors padded to a square, so
    differentiable in all three; each matrix is one chunk."""
    for t, what in ((self, "input"), (input3, "other")):
        if t.ndim < 2:
            raise RuntimeError(f"torch.ormqr: {what} must have at least 2 dimensions.")
    side = -2 if left else -1
    if input2.ndim and left and input2.shape[-1] != min(input3.shape[-2], self.shape[-1]):
        raise RuntimeError("torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], input.shape[-1])")
    if input3.shape[side] != self.shape[-2]:
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    inputs, (mn, k) = (self, input2, input3), self.shape[-2:]
    if 0 in (*self.shape, *input2.shape, *input3.shape):  # (nothing to reflect or multiply: zeros, as torch's)
        return input3 * 0 + sum(self) * 0 + sum(input2) * 0
    if k > mn:  # (the first min(mn, k) reflectors, as tau has)
        self = self[..., :mn]
    elif mn > k:
        self = pad(self, [(0, 0)] * (self.ndim - 1) + [(0, mn - k)])
    q = householder_product(self, input2)
    if transpose:
        q = q.mH
    return guard(matmul(q, input3) if left else matmul(input3, q), *inputs)  # (torch's node saves all three)


# ------------------------------------------------------------------ nonzero_static
def _nonzero_static_array(a, *, size, fill_value):
    idx = np.argwhere(a)
    out = np.full((size, a.ndim), fill_value, dtype=np.int64)
    n = min(size, len(idx))
    out[:n] = idx[:n]
    return out


def _nonzero_static(self, *args, size=None, fill_value=-1):
    """torch's ``nonzero_static(*, size, fill_value=-1)``: the ``(size, ndim)`` indices of the nonzero elements,
    in C order, the first ``size`` of them, rows past their count filled with ``fill_value``: a known shape,
    computed in one task that reads the whole tensor (as ``unique``)."""
    if args:
        raise TypeError(f"nonzero_static() takes from 1 to 0 positional arguments but {len(args)} were given")
    if size is None:
        raise TypeError('nonzero_static() missing 1 required positional arguments: "size"')
    for name, v in (("size", size), ("fill_value", fill_value)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(f"nonzero_static(): argument '{name}' must be int, not {type(v).__name__}")
    if size < 0:
        raise RuntimeError("nonzero_static: 'size' must be an non-negative integer")
    if not self.ndim:  # (a 0-d tensor's indices have no columns)
        return zeros(int(size), 0, dtype=np.int64, device=self.device)
    a = self.detach().array
    whole = a.rechunk(-1)
    out = whole.map_blocks(_nonzero_static_array, size=int(size), fill_value=int(fill_value), dtype=np.int64,
                           chunks=((int(size),), (self.ndim,)), drop_axis=tuple(range(a.ndim)), new_axis=(0, 1),
                           meta=np.empty((0, 0), np.int64))
    return Tensor._make(out)


METHODS = {
    "type": _type, "new": _new, "to_dense": _to_dense, "bfloat16": _dtype_cast("bfloat16"),
    "chalf": _dtype_cast("complex32"), "dim_order": _dim_order, "is_shared": _is_shared,
    "share_memory_": _share_memory_, "is_pinned": _is_pinned, "pin_memory": _pin_memory, "apply_": _apply_,
    "map_": _map_, "map2_": _map2_, "resize_": _resize_, "resize_as_": _resize_as_, "unsafe_chunk": _unsafe_chunk,
    "unsafe_split": _unsafe_split, "unsafe_split_with_sizes": _unsafe_split_with_sizes, "qr": _qr, "svd": _svd,
    "lu": _lu, "lu_solve": _lu_solve, "geqrf": _geqrf_method, "orgqr": _orgqr, "ormqr": _ormqr,
    "nonzero_static": _nonzero_static,
}


def install():
    """Put :data:`METHODS` on :class:`~daskgrad.Tensor` (named as the methods they are), and ``output_nr``."""
    for name, fn in METHODS.items():
        for f in (fn, getattr(fn, "__wrapped__", None)):
            if f is not None:
                f.__name__, f.__qualname__ = name, f"Tensor.{name}"
        setattr(Tensor, name, fn)
    Tensor.output_nr = property(_output_nr, doc="torch's ``output_nr``: which output of its node this tensor is "
                                                "(``unbind``/``split``/``chunk``'s k-th view: k); 0 otherwise, as "
                                                "daskgrad's nodes have one output each (torch's ``svd`` gives 1 for "
                                                "``S``).")
