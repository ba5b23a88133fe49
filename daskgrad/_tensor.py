"""Step 1 of the data flow: the Tensor, a thin autograd wrapper around a dask array.

A Tensor holds a shared ``_Storage`` (the lazy dask array plus torch's in-place
version counter; ``detach()`` shares it, as torch shares storage), and the
autograd fields ``requires_grad``, ``grad``, ``grad_fn``.  Operators delegate to
the op functions in :mod:`daskgrad.ops`; nothing here computes except the
methods whose job is to return values (``item``, ``numpy``, ``compute`` ...).

A Tensor speaks the protocols of its neighbours as their owners define them: it is a dask
collection (``dask.compute``/``persist``/``visualize``; ``to_dask()``), a NumPy array-like
(``np.asarray`` computes, torch's way; :mod:`daskgrad.interop` routes ``np.exp(t)`` to the ops) and
a DLPack producer (``torch.from_dlpack(t)``, ``to_torch()``).
"""
from __future__ import annotations

import warnings
import weakref

import dask
import dask.array as da
import numpy as np

from . import _dask as door, _data, _repr, _state
from ._modes import _state as _modes_state, is_grad_enabled, is_inference_mode_enabled

_NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead. See "
    "github.com/pytorch/pytorch/pull/30531 for more information.")
_GRAD_DTYPE_NAMES = {"float64": ("double", "Double"), "float32": ("float", "Float"),
                     "float16": ("half", "Half"), "int64": ("long", "Long"), "int32": ("int", "Int")}


def _differentiable(dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating)


class _Handle:
    """What ``register_hook`` returns; ``remove()`` unregisters the hook."""

    _next_id = 0

    def __init__(self, table: dict, fn):
        _Handle._next_id += 1
        self.id, self._table = _Handle._next_id, table
        table[self.id] = fn

    def remove(self) -> None:
        self._table.pop(self.id, None)


def _touched(t, what):
    """daskgrad.compile: a traced function changing a tensor it did not make is a side effect a replay
    would not repeat."""
    trace = getattr(_modes_state, "trace", None)
    if trace is not None:
        trace.touched(t, what)


class _Storage:
    """A tensor's value and torch's in-place version counter, shared by ``detach()``.

    ``value`` is the dask array, or an elementwise result not built yet (a
    :class:`~daskgrad._dask.Pending`, which knows its shape, dtype, chunks and meta): reading
    ``array`` builds it.  Recording a chain of elementwise ops then builds no dask layer until a
    submission (or anything else) reads the array."""

    __slots__ = ("value", "version", "inference", "__weakref__")

    def __init__(self, array):
        trace = getattr(_modes_state, "trace", None)
        if trace is not None:  # daskgrad.compile: made by the function it traces, not read from outside
            trace.made(self)
        self.value, self.version = array if type(array) is door.Pending else door.fold(array), 0
        self.inference = is_inference_mode_enabled()  # made under inference_mode: an inference tensor
        if type(array) is not door.Pending:  # (a result not built yet is no kept value)
            _state.share(self)

    @property
    def array(self):
        trace = getattr(_modes_state, "trace", None)
        if trace is not None:  # daskgrad.compile guards what a traced function reads from outside
            trace.read(self)
        value = self.value
        if type(value) is door.Pending:
            built = value.build()
            if self.value is value:  # (not written in place by another thread meanwhile)
                self.value = built
            return self.value
        return value

    @array.setter
    def array(self, array):
        self.value = array


class Tensor:
    """A chunked, lazy array that records operations for reverse-mode autodiff."""

    __slots__ = ("_storage", "_requires_grad", "_grad", "grad_fn", "_retains_grad", "_hooks",
                 "_post_hooks", "_accumulate_node", "_base", "_origin", "_labels", "__weakref__")
    # NumPy's dispatch (np.exp(t), ndarray + t) runs the ops: daskgrad.interop installs __array_ufunc__ and
    # __array_function__ from above; until then numpy defers to the reflected operators
    __array_ufunc__ = None

    def __init__(self, data, requires_grad: bool = False):
        if isinstance(data, Tensor):
            data = data.array
        if not isinstance(data, da.Array):
            data = da.from_array(data, chunks="auto", asarray=False)
        self._init(_Storage(data))
        self.requires_grad = requires_grad

    def _init(self, storage, grad_fn=None, requires_grad=False):
        trace = getattr(_modes_state, "trace", None)
        if trace is not None:  # daskgrad.compile: a tensor the traced function made (its own to change)
            trace.made_tensor(self)
        self._storage, self.grad_fn, self._requires_grad = storage, grad_fn, requires_grad
        self._grad = self._accumulate_node = self._base = None
        self._origin = ()  # for a comparison: the recorded tensors it was computed from
        self._labels = None  # an xarray DataArray's dims, coords, name, attrs (from_array of one)
        self._retains_grad, self._hooks, self._post_hooks = False, {}, {}

    @classmethod
    def _make(cls, array, grad_fn=None, requires_grad=False, base=None):
        t = cls.__new__(cls)
        t._init(_Storage(array), grad_fn, requires_grad)
        t._base = base
        return t

    # ------------------------------------------------------------ array facts
    @property
    def array(self) -> da.Array:
        """The underlying (lazy or persisted) dask array."""
        return self._storage.array

    @property
    def data(self) -> "Tensor":
        """A detached alias sharing storage; unlike torch, writes through it bump the version."""
        return self.detach()

    @data.setter
    def data(self, value):
        if not isinstance(value, (Tensor, da.Array)):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        if self.requires_grad and not _differentiable(value.dtype):
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        self._storage.array = _as_array(value)
        _state.mark_pending(self._storage)

    shape = property(lambda self: self._storage.value.shape)
    ndim = property(lambda self: self._storage.value.ndim)
    dtype = property(lambda self: self._storage.value.dtype)
    chunks = property(lambda self: self._storage.value.chunks)
    _version = property(lambda self: self._storage.version)

    @property
    def size(self):
        """NumPy's attribute and torch's method at once: ``x.size`` is the number of elements (an
        int), ``x.size()`` the shape and ``x.size(dim)`` one length, as torch's."""
        return _Size(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def device(self) -> _data.device:
        """Where the chunks live: ``daskgrad.device("cuda")`` for cupy chunks, else ``device("cpu")`` (a str
        too: ``t.device == "cpu"``)."""
        return _CUDA if type(self._storage.value._meta).__module__.startswith("cupy") else _CPU

    @property
    def is_cuda(self) -> bool:
        return self.device == "cuda"

    def __repr__(self):
        """torch's text, with the values when they are few and already in memory (never computed for
        a repr), else dask's summary of the array: see :mod:`daskgrad._repr`."""
        return _repr.text(self)

    def _repr_html_(self):
        """Jupyter's view: dask's chunk table and grid, with ``grad_fn``, ``requires_grad``, ``is_leaf``,
        dtype and device."""
        return _repr.html_repr(self)

    # ------------------------------------------------------- autograd fields
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._set_requires_grad(flag, "only Tensors of floating point and complex dtype can require gradients")

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self._set_requires_grad(requires_grad, "only Tensors of floating point dtype can require gradients")
        return self

    def is_inference(self) -> bool:
        """Whether this tensor was made under :class:`daskgrad.inference_mode`."""
        return self._storage.inference

    def _set_requires_grad(self, flag, dtype_message):
        _touched(self, "sets requires_grad of")
        if flag and self._storage.inference and not is_inference_mode_enabled():
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
        if self.grad_fn is not None:
            if not flag:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to use a "
                    "computed variable in a subgraph that doesn't require differentiation use "
                    "var_no_grad = var.detach().")
            return
        if flag and not _differentiable(self.dtype):
            raise RuntimeError(dtype_message)
        self._requires_grad = bool(flag)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad:
            warnings.warn(_NONLEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        if self._labels is not None and self._grad is not None and self._grad._labels is None:
            # the gradient of a DataArray's values has its dims and coords (not its attrs: units differ)
            self._grad._labels = {**self._labels, "attrs": None}
        return self._grad

    @grad.setter
    def grad(self, value):
        _touched(self, "sets .grad of")
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError("assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(value.shape)}' to a tensor of size "
                    f"'{list(self.shape)}'. Please ensure that the gradient and the tensor are the same size")
            if value.dtype != self.dtype:
                got = _GRAD_DTYPE_NAMES.get(str(value.dtype), (str(value.dtype),) * 2)[0]
                want = _GRAD_DTYPE_NAMES.get(str(self.dtype), (str(self.dtype),) * 2)[1]
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{got}' to a tensor with grad_dtype "
                    f"'{want}'. The gradient must match the tensor's grad_dtype (defaults to the tensor's "
                    "dtype). You can set the tensor's grad_dtype attribute with a specific dtype, or None "
                    "to allow any dtype. Set grad_dtype with caution. Diverging the dtypes of a tensor and "
                    "its gradient may break downstream systems that assume they match.")
            if value.chunks != self.chunks:
                value = Tensor._make(value.array.rechunk(self.chunks))
        self._grad = value

    @grad.deleter
    def grad(self):
        _touched(self, "sets .grad of")
        self._grad = None

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        _touched(self, "calls retain_grad() on")
        if self.grad_fn is not None and not self._retains_grad:
            self._retains_grad = True
            self.grad_fn._retained = weakref.ref(self)

    def register_hook(self, hook):
        """``hook(grad)`` runs during backward (on the lazy gradient) and may return a replacement."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        _touched(self, "registers a hook on")
        table = self._hooks if self.grad_fn is None else self.grad_fn._tensor_hooks
        return _Handle(table, hook)

    def register_post_accumulate_grad_hook(self, hook):
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        _touched(self, "registers a hook on")
        return _Handle(self._post_hooks, hook)

    def detach(self) -> "Tensor":
        t = Tensor.__new__(Tensor)
        t._init(self._storage)
        return t

    def detach_(self) -> "Tensor":
        if self._base is not None:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using "
                "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set as True, "
                "gradients are views of DDP buckets, and hence detach_() cannot be called on these "
                "gradients. To fix this error, please refer to the Optimizer.zero_grad() function in "
                "torch/optim/optimizer.py as the solution.")
        self.grad_fn, self._requires_grad = None, False
        return self

    # ------------------------------------------------------ getting values out
    def __deepcopy__(self, memo):
        """A copy in memory of the process would be a gather: share the dask array instead (it is
        immutable; writes rebind storage).  As in torch, leaves only, and ``.grad`` is copied."""
        if self.grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the "
                "moment.  If you were attempting to deepcopy a module, this may be because of a "
                "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
        t = memo[id(self)] = type(self)._make(self.array, requires_grad=self.requires_grad)
        t._grad = None if self._grad is None else self._grad.__deepcopy__(memo)
        return t

    def numpy(self, *, force=False):
        """The values as a new NumPy array (computed).  As in torch, a tensor that requires grad
        refuses (outside ``no_grad``) and a cuda one too; ``force=True`` is ``detach().cpu()`` first."""
        if force:
            t = self.detach()
            return (t.cpu() if t.device == "cuda" else t).numpy()
        if self.requires_grad and is_grad_enabled():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self.device == "cuda":
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                            "to host memory first.")
        out = self.compute()
        return np.asarray(out) if isinstance(out, np.generic) else out  # a 0-d tensor: a 0-d array, as torch's

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(t)``: ``numpy()``, torch's rules included.  The values are computed into a
        new array, so NumPy's ``copy=False`` (never copy) cannot be honoured and raises, as NumPy says."""
        if copy is False:
            raise ValueError("Unable to avoid copy while creating an array as requested: a daskgrad Tensor's "
                             "values are computed into a new array (use np.asarray(t)).")
        out = self.numpy()
        if not isinstance(out, np.ndarray):  # a chunk type of another library: its own conversion, or refusal
            out = np.asarray(out)
        return out if dtype is None else out.astype(dtype, copy=False)

    # ------------------------------------------------------------ DLPack (torch.from_dlpack, to_torch)
    def __dlpack__(self, **kwargs):
        """Export the computed values (NumPy or cupy) through DLPack.  As torch's exporter, a tensor
        that requires grad refuses, in grad mode or not."""
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        return self.compute().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        meta = self.array._meta  # the chunk type's empty array: its device, with nothing computed
        return meta.__dlpack_device__() if hasattr(meta, "__dlpack_device__") else (1, 0)

    def to_torch(self):
        """The values as a torch tensor (``torch.from_dlpack``): computed, on the GPU for cupy chunks,
        sharing memory with a new array (never with the chunks daskgrad keeps).  Like every torch
        export, it refuses a tensor that requires grad (``detach()`` first); the result is a torch leaf
        with ``requires_grad=False``: gradients do not flow between the two libraries."""
        import torch

        return torch.from_dlpack(self)

    # ------------------------------------------ a dask collection (dask.compute, persist, visualize)
    def to_dask(self) -> da.Array:
        """The values as a dask array, as ``detach()`` sees them: nothing records what is done with
        it, and, dask arrays being immutable, a later in-place write to this tensor does not show
        through (torch's ``detach()`` shares memory; here the snapshot is the current value)."""
        return self.array

    to_dask_array = to_dask  # the name dask.array.asarray looks for: da.asarray(t) is t.to_dask()

    def to_xarray(self, dims=None, coords=None, name=None, attrs=None):
        """An ``xarray.DataArray`` with the dims, coords, name and attrs of the DataArray this tensor
        was made from by :func:`from_array` (a leaf, and its ``.grad``), or those given.

        A tensor that requires grad is wrapped itself, so xarray's operations on the DataArray
        (``(a - a.mean("time")) ** 2``, ``a.sel(...)``) stay differentiable (``loss.data.backward()``);
        any other is wrapped as its dask array, so all of xarray's dask support works on it
        (``to_zarr``, ``compute``, plotting): ``w.grad.to_xarray().to_zarr(path)`` writes the
        gradient chunk by chunk, with the coords of ``w``'s DataArray."""
        import xarray as xr

        given = {"dims": dims, "coords": coords, "name": name, "attrs": attrs}
        labels = {k: v for k, v in (self._labels or {}).items() if given[k] is None and v is not None}
        labels.update((k, v) for k, v in given.items() if v is not None)
        return xr.DataArray(self if self.requires_grad else self.array, **labels)

    def __dask_graph__(self):
        return self.array.__dask_graph__()

    def __dask_keys__(self):
        return self.array.__dask_keys__()

    def __dask_layers__(self):
        return self.array.__dask_layers__()

    def __dask_tokenize__(self):
        return "daskgrad.Tensor", self.array.name

    __dask_optimize__ = da.Array.__dict__["__dask_optimize__"]  # dask's descriptor: the array optimizer dask configures
    __dask_scheduler__ = staticmethod(da.Array.__dask_scheduler__)

    def __dask_postcompute__(self):
        return self.array.__dask_postcompute__()  # dask.compute(t): the values, as t.compute()

    def __dask_postpersist__(self):
        rebuild, state = self.array.__dask_postpersist__()
        return _rebuilt, (self, self.array, rebuild, state)

    def item(self):
        return self._scalar().item()

    def _scalar(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.compute().reshape(())

    def tolist(self):
        return self.compute().tolist()

    def __float__(self):
        if self.requires_grad:  # torch 2.13 warns here, not in item()
            warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
                          "behavior.\nConsider using tensor.detach() first.", UserWarning, stacklevel=2)
        return float(self._scalar().item())

    def __int__(self):
        return int(self._scalar().item())

    def __format__(self, spec):
        """``f"{loss:.4f}"``: a 0-d tensor formats its value (computed), as torch's; any other takes only
        the empty format (its repr)."""
        if self.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __index__(self):
        if np.issubdtype(self.dtype, np.integer) and self.numel() == 1:
            return int(self)
        raise TypeError("only integer tensors of a single element can be converted to an index")

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._scalar().item())

    __hash__ = object.__hash__

    # --------------------------------------------------------------- in place
    def _check_inplace(self):
        if self._storage.inference and not is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make "
                               "a clone to get a normal tensor before doing inplace update.See "
                               "https://github.com/pytorch/rfcs/pull/17 for more details.")
        if not is_grad_enabled():
            return
        if self.grad_fn is None and self.requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        base = self._base
        if base is not None and base.grad_fn is None and base.requires_grad:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")

    def _assign(self, out: "Tensor") -> "Tensor":
        """Rebind this tensor to ``out`` (the in-place result) and bump the version."""
        if out.shape != self.shape and not _unknown_alike(out.shape, self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(out.shape)}")
        arr = out.array
        if arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        if arr.chunks != self.chunks:
            arr = arr.rechunk(self.chunks)
        st = self._storage
        st.array, st.version = arr, st.version + 1
        node = out.grad_fn
        if node is not None:
            if self._retains_grad and self.grad_fn is not node:  # retain_grad follows the newest version
                if self.grad_fn is not None and self.grad_fn._retained is not None \
                        and self.grad_fn._retained() is self:
                    self.grad_fn._retained = None
                node._retained = weakref.ref(self)
            self.grad_fn, self._requires_grad = node, True
            # the op saved self as it was before the write; that copy is still intact
            for v in node.saved_tensors():
                if v.storage in (st, out._storage):
                    v.storage, v.version = st, st.version
        if self.grad_fn is None:  # a leaf (a parameter, optimizer state): its next value is due
            _state.mark_pending(st)
        return self

    def _inplace(self, op, *args):
        self._check_inplace()
        return self._assign(op(self, *args))

    def zero_(self):
        return self._fill("ZeroBackward0", 0)

    def fill_(self, value):
        if isinstance(value, Tensor):  # a 0-d tensor: it gets the whole gradient, as in copy_
            if value.ndim:
                raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                                   f"{value.ndim} dimensions.")
            return self.copy_(value)
        return self._fill("FillBackward0", value)

def _unknown_alike(a, b):
    """Shapes equal but for lengths unknown in both (NaN after a boolean mask: ``t[mask] += 1``)."""
    return len(a) == len(b) and all(m == n or (m != m and n != n) for m, n in zip(a, b))


def _as_array(value):
    return value.array if isinstance(value, Tensor) else value


def _rebuilt(dsk, t, old, rebuild, state, rename=None):
    """``dask.persist(t)`` is ``t.persist()``: it returns ``t`` itself, its storage now holding the
    persisted chunks, so that it keeps its identity (a parameter the optimizer holds), ``requires_grad``,
    ``grad_fn``, ``.grad`` and hooks.  (Unless an in-place write rebound the storage meanwhile: the
    newer value stays.)  ``dask.optimize(t)`` also returns ``t`` (daskgrad optimizes its graphs as it
    submits them); keys renamed by ``dask.graph_manipulation`` make a new tensor, which records nothing."""
    new = rebuild(dsk, *state, rename=rename)
    if rename:
        return Tensor._make(new)
    if door.materialized(new) and t._storage.array is old:
        t._storage.array = new
    return t


class _Size(int):
    """``x.size``: an int (NumPy's number of elements) that, called, answers as torch's ``size()``."""

    def __new__(cls, shape):
        known = all(n == n for n in shape)  # (unknown lengths after a boolean mask are NaN)
        self = super().__new__(cls, int(np.prod(shape, dtype=np.int64)) if known else -1)
        self._shape = shape
        return self

    def __call__(self, dim=None):
        return self._shape if dim is None else self._shape[dim]


# -------------------------------------------------------------------- factories
_rng = np.random.default_rng()
_DEFAULT_FLOAT = _data.DEFAULT_FLOAT


def manual_seed(seed: int) -> None:
    """Seed the generator behind ``rand``/``randn`` (each call draws a fresh dask seed from it)."""
    global _rng
    _rng = np.random.default_rng(seed)


def _check_requires_grad(dtype, requires_grad):
    if requires_grad and not _differentiable(dtype):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")


def _leaf(array, requires_grad) -> Tensor:
    _check_requires_grad(array.dtype, requires_grad)
    return Tensor._make(array, requires_grad=bool(requires_grad))


def _backend(device):
    if device is None:
        return dask.config.get("array.backend", "numpy")
    device = str(device)
    if device.startswith("cuda"):
        require_cuda()
        return "cupy"
    return "numpy" if device == "cpu" else device


_cuda_ok = False
_CPU, _CUDA = _data.device("cpu"), _data.device("cuda")


def require_cuda() -> None:
    """Fail at the call that asks for ``"cuda"``, in torch's words, rather than deep inside dask: the
    client builds cupy ``meta`` arrays, so it needs cupy and a GPU it can see."""
    global _cuda_ok
    if _cuda_ok:
        return
    try:
        import cupy
    except ImportError:
        raise AssertionError("daskgrad not installed with CUDA support (cupy is missing): "
                             "pip install 'daskgrad[gpu]'") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver or no device: cupy raises its own CUDA errors
        count = 0
    if not count:
        raise RuntimeError("No CUDA GPUs are available")
    _cuda_ok = True


_COPY_CONSTRUCT = ("To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
                   "sourceTensor.detach().clone().requires_grad_(True), rather than daskgrad.tensor(sourceTensor).")


def tensor(data, requires_grad=False, dtype=None, chunks="auto", device=None) -> Tensor:
    """A leaf tensor holding a copy of ``data``, as ``torch.tensor``: a list or scalar, a NumPy or
    cupy array, a torch tensor (copied detached), or a Tensor (with torch's warning).

    The dtype follows torch: arrays, NumPy scalars and torch tensors keep theirs (float64 stays
    float64); Python floats give the default dtype (float32), ints int64, complex numbers complex64,
    and a list promotes its elements as ``torch.promote_types`` does.  Lazy sources (dask, Zarr,
    h5py, xarray) are refused: :func:`from_array` reads them chunk by chunk, when computed.
    """
    dtype = _data.np_dtype(dtype)
    if isinstance(data, Tensor):
        warnings.warn(_COPY_CONSTRUCT, UserWarning, stacklevel=2)
        arr = data.array if chunks == "auto" else data.array.rechunk(chunks)
        return _finish(arr, requires_grad, dtype, device)
    if _data.is_lazy(data):
        raise TypeError(f"daskgrad.tensor copies data that is in memory, and {type(data).__module__}."
                        f"{type(data).__name__} is a lazy array: use daskgrad.from_array(x) (or as_tensor), which "
                        "reads it chunk by chunk when computed")
    # as torch.tensor, a copy: da.from_array copies an in-memory array (a later write to `data` is not seen)
    if _data.is_torch(data):
        host = _torch_array(data.detach())  # torch.tensor(t) copies t's values, detached
    elif _data.is_array(data):
        _data.check_supported(data.dtype)
        host = data
    else:
        if _holds_tensor(data):
            raise TypeError("daskgrad.tensor got a list holding Tensors, whose values it would compute one by one: "
                            "use daskgrad.stack(tensors), which stays lazy and differentiable")
        shape, inferred = _data.infer(data)
        host = np.array(data, dtype=dtype or inferred)
        if host.shape != shape:  # (NumPy reads what torch's shape walk accepted the same way)
            raise ValueError(f"expected a tensor of shape {list(shape)}, got {list(host.shape)}")
    return _finish(da.from_array(host, chunks=chunks, asarray=False), requires_grad, dtype, device)


def _holds_tensor(data):
    return isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) or _holds_tensor(x) for x in data)


def _finish(arr, requires_grad, dtype, device) -> Tensor:
    """The leaf over ``arr``, cast to ``dtype`` and moved to ``device`` (both lazily)."""
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    backend = _backend(device)
    if device is not None and backend != _current_backend(arr):
        arr = arr.to_backend(backend)
    return _leaf(arr, requires_grad)


def _current_backend(arr):
    return "cupy" if type(arr._meta).__module__.startswith("cupy") else "numpy"


def from_array(x, chunks="auto", requires_grad=False, dtype=None, device=None) -> Tensor:
    """A leaf over an array, keeping its dtype (float64 stays float64): like
    :func:`dask.array.from_array`, for dask arrays (rechunked if ``chunks`` is given), Zarr arrays,
    h5py datasets and xarray DataArrays, read chunk by chunk only when computed (nothing is read
    onto the client here), and NumPy and cupy arrays and torch tensors (:func:`from_torch`), which
    ``dask.array.from_array`` copies once: a later write to the source is not seen (where
    ``torch.as_tensor`` would share its memory, a lazy value would change with it)."""
    dtype = _data.np_dtype(dtype)
    if isinstance(x, Tensor):
        return tensor(x, requires_grad=requires_grad, dtype=dtype, chunks=chunks, device=device)
    if _data.is_torch(x):
        arr = da.from_array(_torch_array(x), chunks=chunks, asarray=False)
    elif isinstance(x, da.Array):
        arr = x if chunks == "auto" else x.rechunk(chunks)
    elif _data.package(x) == "xarray":
        arr = _xarray_array(x, chunks)
    else:
        arr = da.from_array(x, chunks=chunks, asarray=False)
    _data.check_supported(arr.dtype)
    t = _finish(arr, requires_grad, dtype, device)
    if _data.package(x) == "xarray":  # its labels, for to_xarray() of the tensor and of its .grad
        t._labels = {"dims": x.dims, "coords": x.coords, "name": x.name, "attrs": dict(x.attrs)}
    return t


def _xarray_array(x, chunks):
    """An xarray DataArray's dask array: its own if it has one, else one xarray makes over its (possibly
    lazily loaded) values, without reading them."""
    if not hasattr(x, "dims") or not hasattr(x, "chunk"):
        raise TypeError(f"daskgrad.from_array takes an xarray DataArray, not a {type(x).__name__} "
                        "(pick a variable: ds['name'])")
    if x.chunks is not None:  # dask-backed already
        return x.data if chunks == "auto" else x.data.rechunk(chunks)
    if chunks == "auto":
        return x.chunk("auto").data
    chunks = da.core.normalize_chunks(chunks, x.shape, dtype=x.dtype)
    return x.chunk(dict(zip(x.dims, chunks))).data


def from_numpy(ndarray, chunks="auto") -> Tensor:
    """``torch.from_numpy``: a leaf with a NumPy array's values and dtype, which :func:`from_array` copies once
    (torch's would share the array's memory: a later write to it is not seen here)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    return from_array(ndarray, chunks=chunks)


def as_tensor(data, dtype=None, device=None, chunks="auto") -> Tensor:
    """``torch.as_tensor``: a Tensor comes back itself (its autograd history kept; cast or moved by
    the differentiable ``astype``/``to`` when ``dtype``/``device`` differ); arrays (NumPy, cupy,
    dask, Zarr, h5py, xarray, torch) go to :func:`from_array`, keeping their dtype (lazy ones stay
    lazy); Python data goes to :func:`tensor`, with its dtype rules."""
    dtype = _data.np_dtype(dtype)
    if isinstance(data, Tensor):
        out = data
        if dtype is not None and out.dtype != dtype:
            out = out.astype(dtype)
        if device is not None and _backend(device) != _current_backend(out.array):
            out = out.to(device)
        return out
    if _data.is_lazy(data) or _data.is_torch(data) or _data.is_array(data):
        return from_array(data, chunks=chunks, dtype=dtype, device=device)
    return tensor(data, dtype=dtype, chunks=chunks, device=device)


def from_torch(t, chunks="auto", requires_grad=False) -> Tensor:
    """A leaf holding a torch tensor's values, read through DLPack (a CPU tensor as NumPy chunks, a
    CUDA one as cupy chunks on its GPU, never through the host) and copied once by
    ``dask.array.from_array``, as NumPy arrays are; its dtype kept.  As every torch export, a tensor
    that requires grad is refused with torch's own error (pass ``t.detach()``): gradients do not flow
    between the libraries, and the new leaf requires grad only if ``requires_grad=True``."""
    if not _data.is_torch(t):
        raise TypeError(f"from_torch() expected a torch.Tensor, but got {type(t).__name__}")
    return _leaf(da.from_array(_torch_array(t), chunks=chunks, asarray=False), requires_grad)


def _torch_array(t):
    """A NumPy (CPU) or cupy (CUDA) view of torch tensor ``t``'s memory; torch itself refuses a tensor
    that requires grad (BufferError)."""
    if t.device.type == "cuda":
        require_cuda()
        import cupy

        return cupy.from_dlpack(t)
    return np.from_dlpack(t)


def _shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _factory(fn, shape, dtype, chunks, requires_grad, device, **kw):
    with dask.config.set({"array.backend": _backend(device)}):
        arr = fn(_shape(shape), dtype=np.dtype(dtype or _DEFAULT_FLOAT), chunks=chunks, **kw)
    return _leaf(arr, requires_grad)


def zeros(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf of zeros (torch's ``zeros``: ``zeros(2, 3)`` or ``zeros((2, 3))``; float32 by default), lazy."""
    return _factory(da.zeros, shape, dtype, chunks, requires_grad, device)


def ones(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf of ones (torch's ``ones``: ``ones(2, 3)`` or ``ones((2, 3))``; float32 by default), lazy."""
    return _factory(da.ones, shape, dtype, chunks, requires_grad, device)


def full(shape, fill_value, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf filled with ``fill_value`` (torch's ``full``: a bool or int value gives bool or int64, a
    float the default float32), lazy."""
    if dtype is None and isinstance(fill_value, (bool, int)) and not isinstance(fill_value, float):
        dtype = np.bool_ if isinstance(fill_value, bool) else np.int64
    return _factory(da.full, (shape,) if not isinstance(shape, int) else (shape,), dtype, chunks,
                    requires_grad, device, fill_value=fill_value)


def arange(start, stop=None, step=1, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A 1-d leaf of ``start, start + step, ...`` below ``stop`` (torch's ``arange``: int64 for int
    arguments, float32 otherwise), lazy."""
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = np.int64 if all(isinstance(v, int) for v in (start, stop, step)) else _DEFAULT_FLOAT
    with dask.config.set({"array.backend": _backend(device)}):
        arr = da.arange(start, stop, step, dtype=dtype, chunks=chunks)
    return _leaf(arr, requires_grad)


def _random(method, shape, dtype, chunks, requires_grad, device):
    seed = int(_rng.integers(2**63))
    backend = _backend(device)
    with dask.config.set({"array.backend": backend}):
        gen = da.random.default_rng(seed)
        arr = getattr(gen, method)(_shape(shape), chunks=chunks, dtype=np.dtype(dtype or _DEFAULT_FLOAT))
    if backend != "numpy" and type(arr._meta) is np.ndarray:  # a backend without its own generator
        arr = arr.to_backend(backend)
    return _leaf(arr, requires_grad)


def rand(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """Uniform on [0, 1); lazy, and reproducible after :func:`manual_seed`."""
    return _random("random", shape, dtype, chunks, requires_grad, device)


def randn(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """Standard normal; lazy, and reproducible after :func:`manual_seed`."""
    return _random("standard_normal", shape, dtype, chunks, requires_grad, device)
