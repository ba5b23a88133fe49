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

import copy
import math
import re
import warnings
import weakref

import dask
import dask.array as da
import numpy as np

from . import _dask as door, _data, _repr, _state, chunk
from ._modes import _state as _modes_state, is_grad_enabled, is_inference_mode_enabled

_NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead. See "
    "github.com/pytorch/pytorch/pull/30531 for more information.")
_GRAD_DTYPE_NAMES = {"float64": ("double", "Double"), "float32": ("float", "Float"),
                     "float16": ("half", "Half"), "int64": ("long", "Long"), "int32": ("int", "Int")}


OVERLAP_SELF = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
                "location. Please clone() the tensor before performing the operation.")
OVERLAP_INPUT = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                 "single memory location. Please clone() the tensor before performing the operation.")


OVERLAP_WINDOWS = ("an in-place write through a view whose elements share memory (unfold with step < size) is "
                   "not supported: torch's result depends on the order its kernel visits them. Only one value "
                   "(fill_, zero_, a number or 0-d tensor assigned) is written through it here; clone() the view to "
                   "write anything else.")


def _shares_elements(shape, strides):
    """Whether two elements of a view lie at one place (``unfold`` with ``step < size``).  None do where
    each axis's stride, in increasing order, passes the reach of the smaller ones; else the places are
    counted, where there are at most a million (a larger view that fails the first test is taken as sharing)."""
    if any(n == 0 for n in shape):
        return False
    reach = 0
    for s, n in sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1):
        if s <= reach:
            break
        reach += s * (n - 1)
    else:
        return False
    if math.prod(shape) > 1_000_000:
        return True
    places = np.zeros(1, dtype=np.int64)
    for n, s in zip(shape, strides):
        places = (places[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    return len(np.unique(places)) < len(places)


OVERLAP_ORDER = ("an in-place op reading a view of the tensor it writes, whose elements it overwrites while reading "
                 "them (x += x[:, :1]), is not supported: torch's result depends on the order its kernel visits "
                 "them (its overlap check cannot tell, so it does not refuse). clone() the operand first.")


def _places_key(shape, strides, offset):
    """A layout by the places it reads in order: length-1 axes (a broadcast's, ``x[None]``) left out, so
    ``x[0:1] = x[0]`` is the very same memory, which torch writes (it strips them too)."""
    return tuple((n, s) for n, s in zip(shape, strides) if n != 1), offset


def _places(shape, strides, offset, unit=1):
    """The memory places of a layout, in elements (or in ``unit`` s of an element's bytes), index order."""
    places = np.full(1, offset, dtype=np.int64)
    for n, s in zip(shape, strides):
        places = (places[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    return places if unit == 1 else (places[:, None] * unit + np.arange(unit, dtype=np.int64)).ravel()


def _order_matters(dest, src, sizes, copies):
    """Whether an in-place op writing layout ``dest`` ``(shape, strides, offset)`` element by element while
    reading ``src`` (broadcast to it) reads a place that another element's write changes: torch's kernel's
    order of visits then decides the values.  ``sizes``: their item sizes in bytes; ``copies``: the op writes
    what it reads as it is (``copy_``, setitem), so a place written with its own value changes nothing.
    Taken as mattering where a layout has more than four million places and the spans meet."""
    (shape, strides, offset), (sshape, sstrides, soffset) = dest, src
    if any(n == 0 for n in shape):
        return False
    lead = len(shape) - len(sshape)
    bstrides = (0,) * lead + tuple(0 if n == 1 else st for n, st in zip(sshape, sstrides))
    spans = []  # (first byte, last byte) of each
    for sts, o, k in ((strides, offset, sizes[0]), (bstrides, soffset, sizes[1])):
        lo = o + sum(st * (n - 1) for n, st in zip(shape, sts) if st < 0)
        hi = o + sum(st * (n - 1) for n, st in zip(shape, sts) if st > 0)
        spans.append((lo * k, hi * k + k - 1))
    if spans[0][1] < spans[1][0] or spans[1][1] < spans[0][0]:
        return False  # (their bytes lie apart)
    if sizes[0] == sizes[1]:
        g = math.gcd(*(abs(st) for n, st in zip(shape, strides) if n > 1),
                     *(abs(st) for n, st in zip(shape, bstrides) if n > 1))
        if g and (offset - soffset) % g:
            return False  # (interleaved: x[:, ::2] and x[:, 1::2])
    if math.prod(shape) * max(sizes) > 4_000_000:
        return True
    if sizes[0] != sizes[1]:  # (a view(dtype) of the other: any byte in common)
        unit = math.gcd(*sizes)
        return bool(np.intersect1d(_places(shape, strides, offset, sizes[0] // unit),
                                   _places(shape, bstrides, soffset, sizes[1] // unit)).size)
    w, r = _places(shape, strides, offset), _places(shape, bstrides, soffset)
    order = np.argsort(w, kind="stable")
    at = np.minimum(np.searchsorted(w[order], r), len(w) - 1)
    writer = order[at]  # (the element whose write lands on the place read, where one does)
    clash = (w[writer] == r) & (writer != np.arange(len(r)))
    if copies:
        clash &= r[writer] != w[writer]
    return bool(clash.any())


_VIEW_SUFFIX = {
    "no_grad": " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
               "moving both the view and the inplace either both inside the no_grad block (if you don't want the "
               "inplace to be tracked) or both outside (if you want the inplace to be tracked).",
    "inference": " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code "
                 "by moving both the view and the inplace either both inside the inference_mode block (if you don't "
                 "want the inplace to be tracked) or both outside (if you want the inplace to be tracked).",
    "multi": " This view is the output of a function that returns multiple views. Such functions do not allow the "
             "output views to be modified inplace. You should replace the inplace operation by an out-of-place one."}


def _view_write_message(t, creation, indirect=False):
    """torch's refusal (``handle_view_on_rebase``) to write into view ``t`` made in no_grad or inference mode, or
    as an output of an op that returns several views (``creation``), or (``indirect``) to use it after a write
    into its base: a view with a node names it (``Output 0 of Slice ...``), one without (its base did not
    require grad, or it was made in no_grad mode) says only how it was made."""
    what = "its base or another view of its base has been" if indirect else "is being"
    node = t.grad_fn.name() if t.grad_fn is not None else t._view.node
    k, op = creation if type(creation) is tuple else (0, None)
    if op is None and node is not None:  # (a view of such an output: torch names the view's own op)
        op = re.sub(r"Backward\d*$", "", node)
    if creation in ("no_grad", "inference") or node is None:
        prefix = f"Output {k} of {op} is a view of a view which was created in" if node is not None else \
            "A view was created in"
        mode = ("inference mode", "normal mode") if creation == "inference" else ("no_grad mode",
                                                                                   "grad mode enabled")
        message = f"{prefix} {mode[0]} and {what} modified inplace {'in' if creation == 'inference' else 'with'} " \
            f"{mode[1]}."
    else:
        message = f"Output {k} of {op} is a view and {what} modified inplace."
    return message + _VIEW_SUFFIX[creation if creation in _VIEW_SUFFIX else "multi"]


def _root(storage):
    return storage.root if type(storage) is _ViewStorage else storage


def _dense(shape, strides):
    """torch's ``is_non_overlapping_and_dense``: the elements fill a block of memory, in some order."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n >= 2)
    want = 1
    for s, n in dims:
        if s != want:
            return False
        want *= n
    return True


def _partly_overlap(shape_a, strides_a, off_a, shape_b, strides_b, off_b):
    """torch's ``get_overlap_status(a, b) == Partial`` for two layouts over one storage: both dense,
    their memory blocks meet and are not the same block read in the same order."""
    na, nb = int(np.prod(shape_a, dtype=np.int64)), int(np.prod(shape_b, dtype=np.int64))
    if not na or not nb or not _dense(shape_a, strides_a) or not _dense(shape_b, strides_b):
        return False  # (torch's "too hard to tell": no error)
    if off_a == off_b and na == nb:
        return tuple(strides_a) != tuple(strides_b)
    return off_a < off_b + nb and off_b < off_a + na


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
    trace = _modes_state.trace
    if trace is not None:
        trace.touched(t, what)


UNINITIALIZED = set()  # the lazy modules' tensor types with no value yet (nn.parameter adds them): no op reads them


def recorded(x):
    """What an op records for operand ``x``: a tensor's value (as a compiled function's trace reads
    it: an argument or a value read from outside through the alias rebound at each call), anything
    else as it is."""
    if not isinstance(x, Tensor):
        return x
    if type(x) in UNINITIALIZED:  # (its placeholder is empty: `p + 1` gave an empty tensor where torch raises)
        raise ValueError(f"Attempted to use an uninitialized parameter in an op. This error happens when you are "
                         f"using a `LazyModule` or explicitly manipulating `torch.nn.parameter.{type(x).__name__}` "
                         "objects. When using LazyModules Call `forward` with a dummy batch to initialize the "
                         "parameters before calling torch functions")
    trace = _modes_state.trace
    return x._storage.value if trace is None else trace.value(x._storage)


class _Storage:
    """A tensor's value and torch's in-place version counter, shared by ``detach()``.

    ``version`` counts every write; ``hidden`` those made through ``.data`` (torch's ``.data`` is a tensor
    with a version counter of its own over the same memory: autograd does not see its writes, and reads
    the values they wrote).  ``value`` is an op's result not built yet (a :class:`~daskgrad._dask.Lazy`, which knows its
    shape, dtype, chunks and meta) or a dask array: recording ops builds no dask graph; reading
    ``array`` builds it (a submission lowers the whole program it asks for at once instead)."""

    __slots__ = ("value", "version", "hidden", "inference", "views", "__weakref__")

    def __init__(self, array):
        trace = _modes_state.trace
        if trace is not None:  # daskgrad.compile: made by the function it traces, not read from outside
            trace.made(self)
        lazy = type(array) is door.Lazy
        self.value, self.version, self.hidden = array if lazy else door.fold(array), 0, 0
        self.views = None  # the live views of this storage (a WeakSet), whose history a write rewrites
        self.inference = _modes_state.inference  # made under inference_mode (is_inference_mode_enabled())
        if not lazy:  # (a result not built yet is no kept value)
            _state.share(self)

    @property
    def array(self):
        """The value as a dask array (built now if it is a Lazy value; the storage keeps the Lazy
        value, whose structure later programs read)."""
        trace = _modes_state.trace
        if trace is not None:  # daskgrad.compile guards what a traced function reads from outside
            trace.read(self)
        value = self.value
        return value.build() if type(value) is door.Lazy else value

    @array.setter
    def array(self, array):
        self.value = array


class _ViewStorage(_Storage):
    """A view's window onto the storage of its base (torch's views share their base's memory and
    version counter).  Dask arrays are immutable, so the window is a recipe: ``steps``, the view
    ops ``(primitive, node name, params)`` from the root storage's value to this one, applied again
    (once, when read) after the root was written, which its version counter tells; the root's value
    computed (the same values) leaves the view's own as it is.  ``strides`` and ``offset`` are the
    view's layout in elements over the root's C-contiguous memory, as torch's; ``meta`` its
    (shape, dtype, chunks), which never change."""

    __slots__ = ("root", "steps", "strides", "offset", "meta", "_cache", "_of")

    def __init__(self, root, steps, strides, offset, array):
        trace = _modes_state.trace
        if trace is not None:
            trace.made(self)
        self.root, self.steps, self.strides, self.offset = root, steps, strides, offset
        self.meta = (array.shape, array.dtype, array.chunks)
        self._cache, self._of = array, root.version  # the view of the root at version `_of`

    @property
    def value(self):
        root = self.root
        if root.version != self._of:  # the base was written since: the view ops on its value, recorded
            a = root.value
            for prim, _, params in self.steps:
                a = door.defer(prim.impl, (a,), tuple(params.items()), elementwise=prim.elementwise)
            self._cache, self._of = a, root.version
        return self._cache

    @value.setter
    def value(self, value):
        """The same values, held otherwise (computed, persisted): a write goes through ``write``."""
        self._cache = value

    def write(self, array):
        """The root holds its value with this view's part replaced by ``array`` (the caller bumps
        the version, then :meth:`holds` what was written)."""
        root = self.root
        root.value = door.defer(_put_steps, (root.value, array), (("steps", self.steps),))

    def holds(self, array):
        """``array`` is this view's value at the root's current version."""
        self._cache, self._of = array, self.root.version

    version = property(lambda self: self.root.version, lambda self, v: setattr(self.root, "version", v))
    hidden = property(lambda self: self.root.hidden, lambda self, v: setattr(self.root, "hidden", v))
    inference = property(lambda self: self.root.inference)


def _resave(node, st, result, view=None):
    """After an in-place op wrote storage ``st``: what its ``node`` saved of ``self`` before the write
    is torch's copy of the original self, which no later write changes (a dask array never changes:
    it only leaves the storage's version counter); its saved result (``result``'s storage) is what
    ``st`` now holds.  Another operand that is ``self`` stays as saved: torch checks its version.
    ``view``: the view written (torch's saved result of an in-place op on a view names, in its error,
    the view's node while the view lives)."""
    first = node._prim.args[0] if node._prim is not None and node._prim.args else None
    for name, v in (node._saved or {}).items():
        if not hasattr(v, "storage"):
            continue
        if v.storage is result:
            v.storage, v.version, v.hidden = st, st.version, st.hidden
            if view is not None:
                v.view = weakref.ref(view)
        elif v.storage is st and name == first:
            copy = _Storage.__new__(_Storage)
            copy.value, copy.version, copy.hidden, copy.inference, copy.views = v._data, 0, 0, st.inference, None
            v.storage, v.version, v.hidden = copy, 0, 0


def _put_steps(a, new, *, steps):
    return put_steps(a, steps, new)


def put_steps(a, steps, new):
    """``a`` with the part that ``steps`` (view ops) see replaced by ``new``, an array or a number: a
    write through a view, functionalized onto its base (torch's ``slice_scatter``, ``select_scatter``
    ...), on dask arrays.  ``a``'s chunks and dtype are kept."""
    return _put(a, steps, new, False)[0]


def _put(a, steps, new, masked):
    """(``a`` written through ``steps``, and, if ``masked``, where: a boolean array, None for all of
    ``a``).  Where is needed below a view op that reads an element several times (``expand``): a
    part of such a view written puts, for each element, the one copy in the part."""
    if not steps:
        if not isinstance(new, da.Array):
            return da.full_like(a, new), None
        new = new.astype(a.dtype) if new.dtype != a.dtype else new
        return (new if new.chunks == a.chunks else new.rechunk(a.chunks)), None
    prim, _, params = steps[0]
    view = prim.view
    gathers = view.gather is not None and len(steps) > 1
    inner_new, inner_mask = _put(prim.impl(a, **params), steps[1:], new, masked or gathers)
    mask = None
    if gathers and inner_mask is not None:
        out, mask = view.gather(a, inner_new, inner_mask, **params)
    else:
        out = view.put(a, inner_new, **params)
        if masked:
            written = inner_mask if inner_mask is not None else da.ones_like(inner_new, dtype=bool)
            mask = view.put(da.zeros_like(a, dtype=bool), written, **params)  # (on the chunks' device)
    return (out if out.chunks == a.chunks else out.rechunk(a.chunks)), mask


def contiguous_strides(shape):
    """torch's strides of a C-contiguous tensor of ``shape``, in elements."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _contiguous(shape, strides):
    """torch's ``is_contiguous``: C order, ignoring length-1 axes (and any layout of nothing)."""
    if any(n == 0 for n in shape):
        return True
    want = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1:
            if s != want:
                return False
            want *= n
    return True


def layout(t, offset=True):
    """(strides, storage offset) of ``t``, as torch's: a view's over its root storage, any other
    tensor C-contiguous (daskgrad gives every op result a new contiguous layout).  ``offset=False``:
    only the strides are read (a compiled function's trace guards the offset where it is read)."""
    st = t._storage
    if type(st) is _ViewStorage:
        trace = _modes_state.trace
        if trace is not None and offset:  # daskgrad.compile: the offset of a view of a tensor from outside
            trace.laid_out(st)
        return st.strides, st.offset
    return contiguous_strides(t.shape), 0


class _ViewInfo:
    """What a view knows of how it was made: ``steps`` from its ``_base`` (the autograd history a
    write through it rewrites), and torch's creation mode: ``None`` (grad mode), ``"no_grad"``,
    ``"inference"``, or
    ``(output number, op)`` for an output of an op that returns several views (``unbind``); ``node``: the name of
    torch's node for it, where torch's view has one (made in grad mode of a tensor that requires grad, or a view
    of a base that does: torch's view made in no_grad mode of such a base requires grad)."""

    __slots__ = ("steps", "creation", "node")

    def __init__(self, steps, creation, node=None):
        self.steps, self.creation, self.node = steps, creation, node


def as_view(out, x, prim, node, params):
    """Make ``out``, the result of view op ``prim`` on ``x``, a view sharing ``x``'s storage (where
    torch's op views: ``prim.view.layout`` says)."""
    if not isinstance(x, Tensor):
        return out
    st = x._storage
    shape = st.value.shape  # (x.shape, read once)
    if type(st) is _ViewStorage:
        root, steps, strides, offset = st.root, st.steps, st.strides, st.offset
    else:
        root, steps, strides, offset = st, (), contiguous_strides(shape), 0
    lay = prim.view.layout(shape, strides, offset, out._storage.value.shape, **params)
    if lay is None:
        return out
    step = (prim, node, params)
    inference, grad = _modes_state.inference, _modes_state.grad  # (is_inference_mode_enabled(), is_grad_enabled())
    if root.inference and not inference:  # torch records no view of an inference tensor
        out.grad_fn, out._requires_grad = None, False
    out._storage = _ViewStorage(root, steps + (step,), lay[0], lay[1], out._storage.value)
    out._hidden_from = x._hidden_from
    if x._base is None:
        out._base, chain, creation = x, (step,), None
    else:
        out._base, chain, creation = x._base, x._view.steps + (step,), x._view.creation
        if type(creation) is tuple:  # a view of an output of unbind: torch names the view's own op
            creation = (0, None)
    if creation is None and not grad:
        creation = "inference" if inference else "no_grad"
    named = grad and (x._requires_grad or out._base._requires_grad)
    out._view = _ViewInfo(chain, creation, node if named and isinstance(node, str) else None)
    if root.views is None:
        root.views = weakref.WeakSet()
    root.views.add(out)
    return out


def _real_value(value, c_type):
    """A complex tensor's value as ``float()``/``int()`` take it: its real part, where the imaginary part is 0
    (torch's; else torch's overflow error)."""
    if isinstance(value, complex):
        if value.imag != 0 or c_type == "int64_t" and not -2.0**63 <= value.real < 2.0**63:
            raise RuntimeError(f"value cannot be converted to type {c_type} without overflow")
        return value.real
    return value


class Tensor:
    """A chunked, lazy array that records operations for reverse-mode autodiff."""

    __slots__ = ("_storage", "_requires_grad", "_grad", "grad_fn", "_retains_grad", "_hooks",
                 "_post_hooks", "_accumulate_node", "_base", "_view", "_origin", "_labels", "_hidden_from",
                 "__weakref__", "__dict__")  # (__dict__: torch's tensors take the user's attributes, x.scale = 2.0)
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
        trace = _modes_state.trace
        if trace is not None:  # daskgrad.compile: a tensor the traced function made (its own to change)
            trace.made_tensor(self)
        self._storage, self.grad_fn, self._requires_grad = storage, grad_fn, requires_grad
        self._grad = self._accumulate_node = self._base = self._view = None
        self._origin = ()  # for a comparison: the recorded tensors it was computed from
        self._labels = None  # an xarray DataArray's dims, coords, name, attrs (from_array of one)
        self._retains_grad, self._hooks, self._post_hooks = False, {}, {}
        # of ``.data`` (or a view of it): the storage's count of hidden writes when it was made, torch's .data's
        # own version counter starting there (its writes are hidden from the tensor's counter, and autograd)
        self._hidden_from = None

    @classmethod
    def _make(cls, array, grad_fn=None, requires_grad=False):
        t = cls.__new__(cls)
        t._init(_Storage(array), grad_fn, requires_grad)
        return t

    # ------------------------------------------------------------ array facts
    @property
    def array(self) -> da.Array:
        """The underlying (lazy or persisted) dask array."""
        return self._storage.array

    def _is_view(self) -> bool:
        """Whether this tensor is a view of another (``_base``), sharing its storage, as torch's."""
        return self._base is not None

    def is_contiguous(self, memory_format=None) -> bool:
        """torch's answer: False for a view whose elements are not in C order over its base's
        memory (``x.T``, ``x[:, :2]``, ``x.expand(...)``); an op's result is contiguous here."""
        st = self._storage
        return type(st) is not _ViewStorage or _contiguous(self.shape, st.strides)

    def stride(self, dim=None):
        """torch's strides in elements (of ``dim``, or all as a tuple): a view's over its base's memory, as
        torch lays it out; an op's result is C-contiguous here (where torch's keeps an input's layout,
        ``(x.T * 2).stride()``, the numbers differ, as ``is_contiguous`` does)."""
        strides = layout(self, offset=False)[0]
        if dim is None:
            return tuple(strides)
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
            raise TypeError(f"stride(): argument 'dim' (position 1) must be int, not {type(dim).__name__}")
        if not self.ndim:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        if not -self.ndim <= dim < self.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-self.ndim}, {self.ndim - 1}], "
                             f"but got {dim})")
        return strides[dim]

    def storage_offset(self) -> int:
        """torch's offset, in elements, of a view's first element in its base's memory (0 otherwise)."""
        return layout(self)[1]

    @property
    def data(self) -> "Tensor":
        """A detached alias sharing storage, as torch's: with a version counter of its own, so that autograd does
        not see a write through it (``x.data.mul_(2)``), and a backward reads the values it wrote."""
        t = self.detach()
        t._hidden_from = self._storage.hidden
        return t

    @data.setter
    def data(self, value):
        if not isinstance(value, (Tensor, da.Array)):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        if self.requires_grad and not _differentiable(value.dtype):
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        new = recorded(value)
        st = self._storage
        if type(st) is _ViewStorage:  # as torch's set_data: a storage of its own
            self._storage = _Storage(new)
            return
        if st.views:  # torch's views keep the old storage: theirs now holds the old value
            old = _Storage.__new__(_Storage)
            old.value, old.version, old.hidden = st.value, st.version, st.hidden
            old.inference, old.views = st.inference, st.views
            for v in st.views:
                v._storage.root = old
            st.views = None
        st.value = new
        _state.mark_pending(st)

    shape = property(lambda self: self._storage.value.shape,
                     doc="The tensor's shape, a tuple of ints (torch's ``Tensor.shape``; known without computing).")
    ndim = property(lambda self: self._storage.value.ndim, doc="The number of axes (torch's ``Tensor.ndim``).")
    dtype = property(lambda self: self._storage.value.dtype,
                     doc="The element type, a NumPy dtype (``x.dtype == daskgrad.float32``).")
    chunks = property(lambda self: self._storage.value.chunks,
                      doc="The chunk lengths along each axis, as dask.array's ``chunks``: "
                          "``((2, 2), (3,))`` for a (4, 3) tensor in two row chunks.")
    _version = property(lambda self: self._storage.version - self._storage.hidden if self._hidden_from is None
                        else self._storage.hidden - self._hidden_from)

    @property
    def size(self):
        """NumPy's attribute and torch's method at once: ``x.size`` is the number of elements (an
        int), ``x.size()`` the shape and ``x.size(dim)`` one length, as torch's.  Lengths not known until
        computed (rows after a boolean mask: ``shape`` holds dask's NaN) are counted where the tensor lives, as
        :meth:`numel` counts: a submission of one number a dim, no chunk comes to the client."""
        shape = self.shape
        if any(n != n for n in shape):
            shape = tuple(Tensor._make(door.defer(_lengths, (self._storage.value,))).tolist())
        return _Size(shape)

    def dim(self) -> int:
        """The number of axes, as torch's ``Tensor.dim()`` (``ndim``)."""
        return self.ndim

    def numel(self) -> int:
        """The number of elements, as torch's ``Tensor.numel()``.  A length not known until computed (rows
        after a boolean mask: dask's NaN) is counted where the tensor lives: a submission of a one-number sum,
        no chunk comes to the client."""
        n = math.prod(self.shape)
        if n == n:
            return int(n)
        return Tensor._make(door.defer(_element_count, (self._storage.value,))).item()

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        n = self.shape[0]
        return n if n == n else self.size(0)  # (a length not known until computed: counted, as size() does)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def device(self) -> _data.device:
        """Where the chunks live: ``daskgrad.device("cuda")`` for cupy chunks, else ``device("cpu")`` (a str
        too: ``t.device == "cpu"``)."""
        return _CUDA if type(self._storage.value._meta).__module__.startswith("cupy") else _CPU

    @property
    def is_cuda(self) -> bool:
        """Whether the chunks are cupy arrays on a GPU (torch's ``Tensor.is_cuda``)."""
        return self.device == "cuda"

    @property
    def is_cpu(self) -> bool:
        """Whether the chunks are host arrays (torch's ``Tensor.is_cpu``)."""
        return self.device == "cpu"

    def get_device(self) -> int:
        """torch's ``Tensor.get_device()``: -1 for chunks on the host, the GPU's index for cupy chunks (0:
        daskgrad's ``cuda`` device has no index of its own; each worker's chunks are on its GPU)."""
        return -1 if self.device == "cpu" else (self.device.index or 0)

    @property
    def layout(self) -> _data.layout:
        """torch's ``Tensor.layout``: ``daskgrad.strided`` (dense chunks), torch's default."""
        return _data.strided

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
        """Whether gradients are computed for this tensor, as torch's: an op's result requires grad
        when grad mode is on and an input does. Set it only on leaves (``True`` on a non-leaf is a
        no-op; ``False`` raises torch's error), and only on floating-point or complex tensors."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if flag and self.grad_fn is not None:  # (torch's setter refuses a non-leaf even where nothing changes;
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")  # requires_grad_ not)
        self._set_requires_grad(flag, "only Tensors of floating point and complex dtype can require gradients")

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Set ``requires_grad`` in place and return this tensor, as torch's ``Tensor.requires_grad_``.

        Parameters
        ----------
        requires_grad : bool, optional
            Whether autograd should record operations on this tensor. Default: ``True``.
        """
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
        """Whether this tensor is a leaf of the graph (it has no ``grad_fn``): every tensor the user
        made, and every tensor that does not require grad (torch's ``Tensor.is_leaf``)."""
        return self.grad_fn is None

    @property
    def retains_grad(self) -> bool:
        """Whether this non-leaf's ``.grad`` is filled by backward (after :meth:`retain_grad`)."""
        return self._retains_grad

    @property
    def grad(self):
        """The gradient backward accumulated into this leaf: ``None`` until a backward reaches it, then
        a tensor of this tensor's shape, dtype and chunks, held in (cluster) memory. Later backwards
        add into it; set it to ``None`` (or use ``optimizer.zero_grad()``) between steps. Reading it
        on a non-leaf that did not :meth:`retain_grad` warns and gives ``None``, as torch's."""
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
            st = value._storage
            if value.chunks != self.chunks and type(st) is _Storage and not st.views and value.grad_fn is None:
                # .grad is the tensor assigned (torch's: backward adds into it in place), in this tensor's
                # chunks: its storage holds the same values rechunked (computed by the next submission).
                # A view, or a tensor with views or a history, keeps its own chunks.
                st.value = door.defer(_rechunked, (st.value,), (("chunks", self.chunks),))
                _state.mark_pending(st)
        self._grad = value

    @grad.deleter
    def grad(self):
        _touched(self, "sets .grad of")
        self._grad = None

    def retain_grad(self) -> None:
        """Fill this non-leaf's ``.grad`` during backward, as torch's ``Tensor.retain_grad()`` (a no-op on
        a leaf; raises on a tensor that does not require grad)."""
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
        """Register ``hook(tensor)``, called after backward has accumulated into this leaf's ``.grad``
        (torch's ``Tensor.register_post_accumulate_grad_hook``; leaves only). Returns a handle whose
        ``remove()`` unregisters it."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        _touched(self, "registers a hook on")
        return _Handle(self._post_hooks, hook)

    def detach(self) -> "Tensor":
        """A new leaf over the same storage that does not require grad, as torch's ``Tensor.detach()``:
        an in-place write to either is seen by both (and bumps the shared version counter)."""
        t = Tensor.__new__(Tensor)
        t._init(self._storage)
        t._hidden_from = self._hidden_from  # (of ``.data``: its version counter, as torch's)
        return t

    def detach_(self) -> "Tensor":
        """Detach this tensor from the graph in place: it becomes a leaf that does not require grad
        (torch's ``Tensor.detach_()``). Returns this tensor."""
        if self._base is not None:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are using "
                "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set as True, "
                "gradients are views of DDP buckets, and hence detach_() cannot be called on these "
                "gradients. To fix this error, please refer to the Optimizer.zero_grad() function in "
                "daskgrad/optim/optimizer.py as the solution.")
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
        if self.__dict__:  # (the user's attributes, as torch's)
            t.__dict__.update(copy.deepcopy(self.__dict__, memo))
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
        meta = self._storage.value._meta  # the chunk type's empty array: its device, with nothing computed
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

    # dask.array's attributes, answered by the dask array (``blocks`` and ``map_blocks``, which
    # record ops, are installed by daskgrad.function)
    @property
    def dask(self):
        """The task graph of the values, a ``HighLevelGraph``, as dask.array's ``Array.dask``."""
        return self.array.dask

    @property
    def nbytes(self) -> int:
        """The number of bytes of the values (elements times itemsize), as dask.array's ``nbytes``."""
        return self.array.nbytes

    @property
    def chunksize(self) -> tuple:
        """The largest chunk's length along each axis, as dask.array's ``chunksize``."""
        return self.array.chunksize

    @property
    def numblocks(self) -> tuple:
        """The number of chunks along each axis, as dask.array's ``numblocks``."""
        return self.array.numblocks

    def visualize(self, filename="mydask", format=None, optimize_graph=False, **kwargs):
        """Draw the task graph of the values with graphviz, as dask.array's ``visualize`` (same
        arguments; needs the ``graphviz`` package and its ``dot`` program).  The graph is the forward
        one; ``backward()`` builds the reverse graph when it runs."""
        return self.array.visualize(filename=filename, format=format, optimize_graph=optimize_graph, **kwargs)

    def to_delayed(self, optimize_graph=True):
        """The chunks as an array of ``dask.delayed`` objects, one per block, as dask.array's
        ``to_delayed``; like :meth:`to_dask`, it leaves autograd (nothing done with them is recorded)."""
        return self.array.to_delayed(optimize_graph=optimize_graph)

    def to_xarray(self, dims=None, coords=None, name=None, attrs=None):
        """An ``xarray.DataArray`` with the dims, coords, name and attrs of the DataArray this tensor
        was made from by :func:`from_array` (a leaf, and its ``.grad``), or those given.

        A tensor that requires grad is wrapped itself, so xarray's operations on the DataArray
        (``(a - a.mean("time")) ** 2``, ``a.sel(...)``) stay differentiable (``loss.data.backward()``);
        any other is wrapped as its dask array, so all of xarray's dask support works on it
        (``to_zarr``, ``compute``, plotting): ``w.grad.to_xarray().to_zarr(path)`` writes the
        gradient chunk by chunk, with the coords of ``w``'s DataArray."""
        try:
            import xarray as xr
        except ImportError:
            raise ImportError("Tensor.to_xarray needs xarray: pip install 'daskgrad[xarray]'") from None

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
        """The value of a one-element tensor as a Python number, as torch's ``Tensor.item()`` (computes it;
        after ``backward()`` a loss's value is already in memory, so nothing runs)."""
        return self._scalar().item()

    def _scalar(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.compute().reshape(())

    def tolist(self):
        """The values as nested Python lists (a number for a 0-d tensor), as torch's ``Tensor.tolist()``."""
        return self.compute().tolist()

    def __float__(self):
        if self.requires_grad:  # torch 2.13 warns here, not in item()
            warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
                          "behavior.\nConsider using tensor.detach() first.", UserWarning, stacklevel=2)
        return float(_real_value(self._scalar().item(), "double"))

    def __int__(self):
        return int(_real_value(self._scalar().item(), "int64_t"))

    def __complex__(self):
        return complex(self._scalar().item())

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
    def _check_inplace(self, others=(), copies=False):
        """torch's refusals of an in-place write into this tensor, with operands ``others``: torch checks how a
        view was made when the result requires grad (its base does, or an operand does; a copy into integers or
        bools, ``copies``, takes no gradient)."""
        if self._storage.inference and not is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make "
                               "a clone to get a normal tensor before doing inplace update.See "
                               "https://github.com/pytorch/rfcs/pull/17 for more details.")
        if not is_grad_enabled():
            return
        base = self._base
        operand = (any(isinstance(o, Tensor) and o.requires_grad for o in others)
                   and (not copies or _differentiable(self.dtype)))
        if base is not None and (base.requires_grad or operand):  # torch checks how a view was made before the leaf
            creation = self._view.creation
            if creation is not None:
                raise RuntimeError(_view_write_message(self, creation))
            if base.requires_grad and base.grad_fn is None:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                   "operation.")
        if self.grad_fn is None and self.requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")

    def _check_overlap(self, others=(), shape=None, strides=None, offset=None, one_value=False, copies=False):
        """torch's refusals to write where one memory location is read or written twice: this tensor
        (or the part of it given by ``shape``/``strides``/``offset``) overlaps itself (an
        ``expand``ed view), or partly overlaps an operand tensor of the write.  A write whose result
        torch's kernel order decides (overlapping ``unfold`` windows) is refused too, unless it puts
        ``one_value`` everywhere (a number, a 0-d tensor); so is one whose operand overlaps what it writes
        in a way torch's check cannot tell (:func:`_order_matters`; ``copies``: the write copies the operand)."""
        st = self._storage
        if shape is None and type(st) is _ViewStorage:
            shape, (strides, offset) = self.shape, layout(self)
        if shape is not None and any(s == 0 and n > 1 for n, s in zip(shape, strides)):
            raise RuntimeError(OVERLAP_SELF)
        if shape is not None and not one_value and _shares_elements(shape, strides):
            raise NotImplementedError(OVERLAP_WINDOWS)
        root = _root(st)
        for x in others:
            if isinstance(x, Tensor) and _root(x._storage) is root:  # (rare: the plain loop stops here)
                if shape is None:
                    shape, (strides, offset) = self.shape, layout(self)
                x_strides, x_offset = layout(x)
                sizes = (self.dtype.itemsize, x.dtype.itemsize)
                if sizes[0] == sizes[1] and _places_key(x.shape, x_strides, x_offset) == _places_key(
                        shape, strides, offset):
                    continue  # (the very same places, read where written)
                if sizes[0] == sizes[1] and _partly_overlap(shape, strides, offset, x.shape, x_strides, x_offset):
                    raise RuntimeError(OVERLAP_INPUT)
                if _order_matters((tuple(shape), strides, offset), (tuple(x.shape), x_strides, x_offset), sizes,
                                  copies):
                    raise NotImplementedError(OVERLAP_ORDER)  # (torch: "too hard to tell", then its kernel's order)

    def _assign(self, out: "Tensor") -> "Tensor":
        """Rebind this tensor to ``out`` (the in-place result) and bump the version.  A view writes
        through to its base (``_write_view``, installed by :mod:`daskgrad.ops.views`)."""
        if len(out.shape) != len(self.shape) or any(a != b and a == a for a, b in zip(out.shape, self.shape)):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(out.shape)}")
        if type(self._storage) is _ViewStorage:
            return self._write_view(out)
        value = out._storage.value  # (not built: the next program reads the write as recorded)
        if value.dtype != self.dtype:
            value = door.defer(_cast, (value,), (("dtype", self.dtype),))
        if value.chunks != self.chunks and all(n == n for n in self.shape):  # (unknown lengths: dask's own)
            value = door.defer(_rechunked, (value,), (("chunks", self.chunks),))
        st = self._storage
        st.value, st.version = value, st.version + 1
        if self._hidden_from is not None:
            st.hidden += 1
        self._took(out, st)
        if self.grad_fn is None:  # a leaf (a parameter, optimizer state): its next value is due
            _state.mark_pending(st)
        if st.views:
            self._rebase_views(st)
        return self

    def _retain_moved(self, old, node):
        """retain_grad follows the newest version of this tensor: from node ``old`` to ``node``."""
        if self._retains_grad and old is not node:
            if old is not None and old._retained is not None and old._retained() is self:
                old._retained = None
            node._retained = weakref.ref(self)

    def _took(self, out, st):
        """This tensor's history is now ``out``'s (its in-place result, held by storage ``st``)."""
        node = out.grad_fn
        if node is not None and _differentiable(self.dtype):  # (written into integers or bools: no history, as torch)
            self._retain_moved(self.grad_fn, node)
            self.grad_fn, self._requires_grad = node, True
            _resave(node, st, out._storage)

    def _inplace(self, op, *args, one_value=False, copies=False, **kwargs):
        self._check_inplace(args, copies)
        self._check_overlap(args, one_value=one_value, copies=copies)  # (one_value: one value everywhere)
        out = op(self, *args, **kwargs)
        node = out.grad_fn
        if node is not None and node._guards:  # (graph.guard: this write is the op's own, not a later one)
            node._guards = tuple(g for g in node._guards if g.storage is not self._storage)
        if not _data.can_cast(out.dtype, self.dtype):  # (int += 2.5: torch's result type is float32)
            raise RuntimeError(f"result type {_data.TORCH_TYPE_NAMES.get(str(out.dtype), out.dtype)} can't be cast "
                               f"to the desired output type {_data.TORCH_TYPE_NAMES.get(str(self.dtype), self.dtype)}")
        return self._assign(out)

    def zero_(self):
        """Fill this tensor with zeros in place and return it, as torch's ``Tensor.zero_()``."""
        return self._fill("ZeroBackward0", 0)

    def fill_(self, value):
        """Fill this tensor with ``value`` (a number or a 0-d tensor) in place and return it, as torch's
        ``Tensor.fill_``."""
        if isinstance(value, Tensor) and value.ndim:  # (a 0-d tensor gets the whole gradient: see _fill)
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{value.ndim} dimensions.")
        return self._fill("FillBackward2", value)

def _cast(a, dtype):
    return a.astype(dtype)


def _block_size(b):
    return np.full((1,) * b.ndim, b.size, dtype=np.int64)


def _element_count(a):
    """The number of elements of ``a`` (a dask array of unknown chunk lengths), summed from its blocks' sizes."""
    sizes = a.map_blocks(_block_size, chunks=tuple((1,) * len(c) for c in a.chunks), dtype=np.int64,
                         meta=np.empty((0,) * a.ndim, np.int64))
    return sizes.sum()


def _block_shape(b):
    return np.array(b.shape, dtype=np.int64).reshape((1,) * b.ndim + (b.ndim,))


def _lengths(a):
    """The length of each dim of ``a`` (a dask array of unknown chunk lengths), summed from its blocks' shapes."""
    shapes = a.map_blocks(_block_shape, chunks=tuple((1,) * len(c) for c in a.chunks) + ((a.ndim,),),
                          new_axis=a.ndim, dtype=np.int64, meta=np.empty((0,) * (a.ndim + 1), np.int64))
    first = (0,) * a.ndim
    return da.stack([shapes[first[:d] + (slice(None),) + first[d + 1:] + (d,)].sum() for d in range(a.ndim)])


def _rechunked(a, chunks):
    return a.rechunk(chunks)


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
    """Seed the generator behind every draw (``rand``, ``randn``, ``x.normal_()``, dropout ...): each draws
    its run seed from it."""
    global _rng
    _rng = np.random.default_rng(seed)


def run_seed() -> door.Constant:
    """The seed of one draw, from daskgrad's generator (:func:`manual_seed`): a 0-d value the program reads
    (``door.Constant``), not a param, so a loop that draws every step (``eps = torch.randn(n)``, a dropout
    mask) is one program, cached and instantiated, not a new one lowered every step."""
    return door.Constant(np.int64(_rng.integers(2**63)))


def drawn_array(a, *rest, kind, params, producer=False):
    """:func:`.chunk.random_block` over ``a``'s chunks (``rest``: bernoulli's probabilities if any, then the
    run seed, a 0-d array): ``a``'s shape, chunks, dtype and chunk type, with values drawn from ``kind``.
    ``producer``: the chunks are new data (``rand``), as dask marks ``from_array``'s: a distributed scheduler
    spreads them over the workers (as root tasks) rather than running them all where the seed is."""
    *probs, seed = rest
    extra = tuple(p if p.shape == a.shape and p.chunks == a.chunks else da.broadcast_to(p, a.shape).rechunk(a.chunks)
                  for p in probs)
    return da.map_blocks(chunk.random_block, a, *extra, seed, kind=kind, params=params, dtype=a.dtype, meta=a._meta,
                         _data_producer=producer)


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
    return _finish(door.from_memory(host, chunks), requires_grad, dtype, device)


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
        arr = door.from_memory(_torch_array(x), chunks)
    elif isinstance(x, da.Array):
        arr = x if chunks == "auto" else x.rechunk(chunks)
    elif _data.package(x) == "xarray":
        arr = _xarray_array(x, chunks)
    elif _data.is_array(x):
        arr = door.from_memory(x, chunks)
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


MAX_CHUNKS = 1_000_000  # chunks of one made tensor (dask config daskgrad.max-chunks): one task each, per op


def check_size(name, shape, dtype, chunks, negative=None):
    """Refuse at once, as torch does, a tensor that cannot be made: a negative dimension (torch's
    words; ``negative`` is the message where torch has one of its own), or more chunks than
    ``daskgrad.max-chunks`` -- counted from the shape and ``chunks`` before dask builds them (10**15
    elements in 128 MiB chunks would take dask 15 s to lay out, and a graph of 30 M tasks per op)."""
    shape = tuple(shape)
    for d in shape:
        if d < 0:
            raise RuntimeError(negative or f"Trying to create tensor with negative dimension {d}: {list(shape)}")
    limit = int(dask.config.get("daskgrad.max-chunks", MAX_CHUNKS))
    count = _chunk_count(shape, np.dtype(dtype).itemsize, chunks)
    if count is not None and count > limit:
        numel, dtype = int(np.prod(shape, dtype=object)), np.dtype(dtype)
        raise RuntimeError(f"{name}: you tried to make a tensor of {numel} elements ({numel * dtype.itemsize} "
                           f"bytes of {dtype}) in {count} chunks, more than the {limit} chunks daskgrad "
                           "builds for one tensor (dask config 'daskgrad.max-chunks'): pass larger chunks= (each "
                           "chunk must fit in a worker's memory), or make a smaller tensor.")


def _chunk_count(shape, itemsize, chunks):
    """How many chunks dask makes of ``shape`` with ``chunks`` (its forms: an int, -1/None, a byte size
    or "auto", explicit sizes, per axis or for all), without making them; for "auto" (or a byte size)
    the fewest it can make.  None where the form is one not counted here (dask checks it)."""
    per_axis = chunks if isinstance(chunks, (tuple, list)) else (chunks,) * len(shape)
    if len(per_axis) != len(shape):
        return None
    count, auto = 1, None
    for size, c in zip(shape, per_axis):
        if c is None or (isinstance(c, int) and c == -1):
            continue
        if isinstance(c, (int, np.integer)) and c > 0:
            count *= -(-int(size) // int(c))
        elif isinstance(c, (tuple, list)):
            count *= len(c)
        elif isinstance(c, str):
            auto = c
        else:
            return None
    if auto is not None:
        from dask.utils import parse_bytes

        limit = parse_bytes(dask.config.get("array.chunk-size") if auto == "auto" else auto)
        count = max(count, -(-int(np.prod(shape, dtype=object)) * itemsize // max(limit, 1)))
    return count


def _factory(fn, shape, dtype, chunks, requires_grad, device, name, negative=None, **kw):
    """A leaf of dask's creation function ``fn``, recorded (no dask graph until its value is read)."""
    shape, dtype = _shape(shape), np.dtype(dtype or _DEFAULT_FLOAT)
    check_size(name, shape, dtype, chunks, negative)
    params = (("fn", fn), ("shape", shape), ("dtype", dtype), ("chunks", chunks),
              ("backend", _backend(device))) + tuple(kw.items())
    return _leaf(door.defer(_created, (), params), requires_grad)


def _created(*, fn, backend, **kw):
    with dask.config.set({"array.backend": backend}):
        return fn(kw.pop("shape"), **kw)


def zeros(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf of zeros (torch's ``zeros``: ``zeros(2, 3)`` or ``zeros((2, 3))``; float32 by default), lazy."""
    return _factory(da.zeros, shape, dtype, chunks, requires_grad, device, "zeros",
                    "zeros: Dimension size must be non-negative.")


def ones(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf of ones (torch's ``ones``: ``ones(2, 3)`` or ``ones((2, 3))``; float32 by default), lazy."""
    return _factory(da.ones, shape, dtype, chunks, requires_grad, device, "ones")


def full(shape, fill_value, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A leaf filled with ``fill_value`` (torch's ``full``: a bool or int value gives bool or int64, a
    float the default float32), lazy."""
    if dtype is None and isinstance(fill_value, (bool, int)) and not isinstance(fill_value, float):
        dtype = np.bool_ if isinstance(fill_value, bool) else np.int64
    return _factory(da.full, (shape,) if not isinstance(shape, int) else (shape,), dtype, chunks,
                    requires_grad, device, "full", fill_value=fill_value)


def arange(start, stop=None, step=1, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """A 1-d leaf of ``start, start + step, ...`` below ``stop`` (torch's ``arange``: int64 for int
    arguments, float32 otherwise), lazy."""
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        dtype = np.int64 if all(isinstance(v, int) for v in (start, stop, step)) else _DEFAULT_FLOAT
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (stop - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    check_size("arange", (max(0, int(np.ceil((stop - start) / step))),), dtype, chunks)
    params = (("fn", _arange), ("shape", (start, stop, step)), ("dtype", np.dtype(dtype)), ("chunks", chunks),
              ("backend", _backend(device)))
    return _leaf(door.defer(_created, (), params), requires_grad)


def _arange(bounds, dtype, chunks):
    return da.arange(*bounds, dtype=dtype, chunks=chunks)


def check_draw_dtype(kind, dtype):
    """torch's refusal of ``rand``/``randn`` (``kind``: "uniform"/"normal") and their ``_like`` forms of a
    dtype they do not draw (integers, bool)."""
    if dtype.kind not in "fc":
        kernel = "check_uniform_bounds" if kind == "uniform" else "normal_kernel_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{_data.TORCH_TYPE_NAMES.get(dtype.name, dtype.name)}'")


def _random(kind, shape, dtype, chunks, requires_grad, device):
    """A leaf drawn as ``zeros(...).uniform_()`` / ``.normal_()`` draws (each chunk from the run seed and its
    block id), the run seed a value the program reads (:func:`run_seed`)."""
    shape, dtype = _shape(shape), np.dtype(dtype or _DEFAULT_FLOAT)
    check_size("rand" if kind == "uniform" else "randn", shape, dtype, chunks)
    check_draw_dtype(kind, dtype)
    params = (("shape", shape), ("dtype", dtype), ("chunks", chunks), ("backend", _backend(device)), ("kind", kind),
              ("params", (0.0, 1.0)))
    return _leaf(door.defer(_random_array, (run_seed(),), params), requires_grad)


def _random_array(seed, *, shape, dtype, chunks, backend, kind, params):
    with dask.config.set({"array.backend": backend}):
        a = da.zeros(shape, dtype=dtype, chunks=chunks)
    return drawn_array(a, seed, kind=kind, params=params, producer=True)


def rand(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """Uniform on [0, 1) (torch's ``rand``: float32 by default; a complex dtype draws each part), lazy, and
    reproducible after :func:`manual_seed`: each chunk drawn from the call's run seed and its block id, as
    ``rand_like``; the run seed a value the program reads, so a loop that draws every step is one program."""
    return _random("uniform", shape, dtype, chunks, requires_grad, device)


def randn(*shape, dtype=None, chunks="auto", requires_grad=False, device=None) -> Tensor:
    """Standard normal (torch's ``randn``: float32 by default; a complex dtype draws each part with variance
    1/2), lazy, and reproducible after :func:`manual_seed`, drawn as :func:`rand`."""
    return _random("normal", shape, dtype, chunks, requires_grad, device)
