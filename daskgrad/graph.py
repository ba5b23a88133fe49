"""Step 2 of the data flow: how an op result remembers where it came from.

Every differentiable op is a :class:`Primitive` in one table, :data:`PRIMITIVES`: its name,
torch's node name(s), its forward ``impl`` and its VJP rule ``rule(g, s, **params)``.  An op is
applied with ``p.bind(*inputs, **params)``; when grad mode is on and an input requires grad,
the result gets a ``grad_fn`` node holding the primitive, the plain params, the edges to the
inputs' nodes (``next_functions``) and the tensors the rule saved -- tensors live only there,
so releasing the saved values frees everything.
Nodes never hold dask results, only lazy arrays (or persisted ones when a graph
is retained), so building this graph never computes anything.
"""
from __future__ import annotations

import functools
import itertools
import numbers
import os
import re
import threading
import traceback
import warnings
import weakref

import numpy as np

from . import _dask as door
from ._data import int_range, result_type, wrapped_int
from ._modes import _state as _modes, is_anomaly_enabled
from ._tensor import Tensor, _Handle, _ViewStorage, as_view, recorded

# ------------------------------------------------------------------------ errors
INFERENCE_SAVE_MESSAGE = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use "
    "it in autograd, or use `daskgrad.no_grad()` instead of `daskgrad.inference_mode()`.")

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


def type_repr(dtype) -> str:
    """``daskgrad.FloatTensor`` in the place where torch prints ``torch.FloatTensor``."""
    names = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long",
             "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool",
             "complex64": "ComplexFloat", "complex128": "ComplexDouble"}
    return f"daskgrad.{names.get(str(dtype), str(dtype))}Tensor"


def size_repr(shape) -> str:
    return f"daskgrad.Size({list(shape)})"


# ------------------------------------------------------------------ saved values
class SavedTensor:
    """A tensor saved for backward: its data at save time and its storage version.

    Dask arrays are immutable, so the data can never be overwritten; the version
    check exists to give torch's error when the user modified the tensor in place.
    """

    __slots__ = ("_data", "version", "storage", "grad_fn", "leaf", "requires_grad", "dtype", "shape",
                 "persisted", "consumer", "orig", "lazy", "view", "hidden", "alias")

    def __init__(self, t, is_output=False, consumer=None):
        self.storage = storage = t._storage
        self._data = value = storage.value  # (a result not built yet stays so: see _Storage)
        self.lazy = None
        self.version, self.hidden, self.alias = storage.version, storage.hidden, t._hidden_from is not None
        grad_fn, self.requires_grad = t.grad_fn, t._requires_grad
        # an op's own output points back at its node: keep that link weak (no reference cycle)
        self.grad_fn = weakref.ref(grad_fn) if is_output else grad_fn
        # a leaf that requires grad must come back as itself so double backward reaches it
        self.leaf = t if (grad_fn is None and t._requires_grad) else None
        self.dtype, self.shape = value.dtype, value.shape
        self.persisted = False  # True once its chunks are pinned in (cluster) memory
        self.consumer = consumer  # weakref to the node that saved it (given by save_tensors)
        # a saved input unpacks as the tensor itself while it lives unchanged, as torch's (not an output:
        # that would be a cycle)
        self.orig = None if is_output else weakref.ref(t)
        self.view = None  # (a result written in place through a view: that view, see _resave)

    @classmethod
    def version_of(cls, t, consumer):
        """A record of ``t``'s version only, holding no value (:func:`guard`)."""
        self = cls.__new__(cls)
        self.storage, self.version, self._data, self.lazy = t._storage, t._storage.version, None, None
        self.hidden, self.alias = t._storage.hidden, t._hidden_from is not None
        self.grad_fn, self.requires_grad, self.leaf, self.persisted = t.grad_fn, t.requires_grad, None, False
        self.dtype, self.shape, self.consumer, self.orig = t.dtype, t.shape, weakref.ref(consumer), weakref.ref(t)
        self.view = None
        return self

    def _versions(self):
        """(the version torch's counter of the saved tensor reads now, the one saved): writes through ``.data``
        (``hidden``) are counted apart from the others, as torch's two counters count them."""
        st = self.storage
        if self.alias:
            return st.hidden, self.hidden
        return st.version - st.hidden, self.version - self.hidden

    def check_version(self) -> None:
        """torch's error where the saved tensor was written in place since it was saved; where only a write its
        counter does not see was (through ``.data``, or a tensor saved from ``.data`` written otherwise), the values
        saved are what the storage holds now, as torch's saved tensor reads its memory."""
        st = self.storage
        if st.version == self.version:
            return
        now, saved = self._versions()
        if now == saved:
            if self._data is not None:  # (a record of the version only holds no value)
                if self.persisted:
                    self.unpin()
                self._data, self.persisted, self.lazy = st.value, False, None
            self.version, self.hidden = st.version, st.hidden
            return
        consumer = self.consumer() if self.consumer is not None else None
        if is_anomaly_enabled() and consumer is not None:  # torch names the node that failed
            warnings.warn(f"Error detected in {consumer.name()}. Traceback of forward call that caused "
                          f"the error:\n{''.join(consumer._stack or [])}", UserWarning, stacklevel=2)
        node = self._node()
        orig = self.orig() if self.orig is not None else None
        if orig is not None and orig._storage is self.storage:  # torch names what the input holds now
            node = orig.grad_fn
        op = re.sub(r"Backward\d*$", "", node.name()) if node else ""
        if node is not None and orig is None and type(self.storage) is _ViewStorage:
            # (a view's history, rewritten since its base was written: torch holds a saved input and
            # names its view node; of a result written in place through a view, torch keeps that view's
            # node weakly: while the view lives, else the node that saved it)
            view = self.view() if self.view is not None else None
            if self.orig is not None or view is not None and view._storage is self.storage:
                op = "AsStrided"
        op = "daskgrad::autograd::CopySlices" if op == "CopySlices" else op  # (torch's C++ name)
        producer = f", which is output 0 of {op}," if node else ""
        hint = ("Hint: the backtrace further above shows the operation that failed to compute "
                "its gradient. The variable in question was changed in there or anywhere later. "
                "Good luck!") if is_anomaly_enabled() else (
                "Hint: enable anomaly detection to find the operation that failed to compute its "
                "gradient, with daskgrad.autograd.set_detect_anomaly(True, check_nan=False).")
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{type_repr(self.dtype)} {list(self.shape)}]{producer} is at "
            f"version {now}; expected version {saved} instead. {hint}")

    @property
    def value(self):
        """The saved value: a Lazy value (an op's result not built yet) or a dask array."""
        return self._data

    @property
    def data(self):
        """The saved value as a dask array."""
        return door.value_of(self._data)

    def pin(self, array):
        """Hold the value as ``array`` (persisted): a retained graph's backward reads it from memory,
        and so does any program that reads the value recorded (:attr:`daskgrad._dask.Lazy.computed`)."""
        if type(self._data) is door.Lazy:
            self.lazy = self._data
            self.lazy.computed = array
        self._data, self.persisted = array, True

    def unpin(self):
        """Let go of the value pinned in memory (the graph is released)."""
        if self.lazy is not None and self.lazy.computed is self._data:
            self.lazy.computed = None

    def unpack(self):
        if self.leaf is not None:
            return self.leaf
        if self.storage.version != self.version and self._versions()[0] == self._versions()[1]:
            self.check_version()  # (written through .data since: the values now held)
        orig = self.orig() if self.orig is not None else None
        if (orig is not None and orig._storage is self.storage and self.storage.value is self._data
                and orig.grad_fn is self._node() and orig.requires_grad == self.requires_grad):
            return orig  # the very value saved (not one pinned since, which only this record holds)
        return Tensor._make(self._data, grad_fn=self._node(), requires_grad=self.requires_grad)

    def _node(self):
        return self.grad_fn() if isinstance(self.grad_fn, weakref.ref) else self.grad_fn


class _Saved:
    """What a VJP rule sees as ``s``: saved tensors unpacked on attribute access."""

    __slots__ = ("_node",)

    def __init__(self, node):
        self._node = node

    def __getattr__(self, name):
        if name == "needs":  # which inputs want a cotangent (torch's needs_input_grad)
            return tuple(m is not None for m in self._node._input_meta)
        saved = self._node._saved
        if saved is None:
            raise RuntimeError(FREED_MESSAGE)
        v = saved[name]
        return v.unpack() if isinstance(v, SavedTensor) else v


# ------------------------------------------------------------------------- nodes
class Node:
    """One recorded op.  ``type(node).__name__`` is torch's name, e.g. ``MulBackward0``."""

    __slots__ = ("_prim", "_params", "next_functions", "_saved", "_had_saved", "_input_meta", "_tensor_hooks",
                 "_retained", "_hooks", "_prehooks", "_stack", "_output_meta", "_metadata", "_seq",
                 "_fparams", "_guards", "__weakref__")

    def name(self) -> str:
        return type(self).__name__

    @property
    def metadata(self):
        """A dict that stays with the node, as torch's (made on first use: most nodes never need one)."""
        try:
            return object.__getattribute__(self, "_metadata")
        except AttributeError:
            self._metadata = {}
            return self._metadata

    def __getattr__(self, attr):  # torch exposes saved values as grad_fn._saved_<name>
        if attr.startswith("_saved_"):
            saved = object.__getattribute__(self, "_saved")
            if saved is None:
                raise RuntimeError(FREED_MESSAGE)
            key = attr[len("_saved_"):]
            if key in saved:
                v = saved[key]
                return v.unpack() if isinstance(v, SavedTensor) else v
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attr}'")

    def saved_tensors(self):
        """The saved tensors a rule may read; () once released."""
        return tuple(v for v in (self._saved or {}).values() if isinstance(v, SavedTensor))

    def pinned(self):
        """The saved values held in (cluster) memory: those of a retained or forced graph."""
        return [v for v in self.saved_tensors() if v.persisted]

    def register_hook(self, fn):
        """``fn(grad_inputs, grad_outputs)`` runs after this node's VJP."""
        return _Handle(self._hooks, fn)

    def register_prehook(self, fn):
        """``fn(grad_outputs)`` runs before this node's VJP and may replace them."""
        return _Handle(self._prehooks, fn)

    @property
    def freed(self) -> bool:
        return self._had_saved and self._saved is None

    def release(self) -> None:
        """Drop the saved values (and any persisted chunks they pin on a cluster)."""
        if self._saved is not None and self._had_saved:
            for v in self.pinned():
                v.unpin()
            self._saved = None
        self._guards = ()


class AccumulateGrad(Node):
    """The sink for a leaf that requires grad.  As in torch, the node holds its ``variable``
    and the leaf holds its node weakly: a graph keeps alive the leaves it writes to, even one
    nobody else references (``(dg.tensor([1.], requires_grad=True) + 1).sum().backward()``)."""

    __slots__ = ("variable",)


_node_classes: dict[str, type] = {"AccumulateGrad": AccumulateGrad}


def node_class(name: str) -> type:
    cls = _node_classes.get(name)
    if cls is None:
        cls = _node_classes[name] = type(name, (Node,), {"__slots__": ()})
    return cls


_made = itertools.count()  # nodes made so far: a node's _seq tells what was made after a point (checkpoint)


def mark() -> int:
    """A point in the recording: the nodes made after it have a larger ``_seq`` (see :func:`relabel`)."""
    return next(_made)


def relabel(t, name, since):
    """Give ``t``'s node torch's name ``name`` if it was made after ``since`` (:func:`mark`): the last node of
    a composition that stands for one of torch's ops (``x.xlogy_(y)`` records ``XlogyBackward0``, not the
    ``WhereBackward0`` it ends with).  A node made before, an input's handed back as it is, keeps its name."""
    node = t.grad_fn
    if node is not None and node._seq > since:
        node.__class__ = _relabeled(name, getattr(type(node), "composes", type(node).__name__))
    return t


_relabeled_classes: dict[tuple, type] = {}


def _relabeled(name, composes):
    """The class of a node named ``name`` that its op's node ``composes`` (``WhereBackward0``) stands for: its
    ``composes`` tells the op table's coverage test which of the primitive's own names it reached."""
    cls = _relabeled_classes.get((name, composes))
    if cls is None:
        cls = _relabeled_classes[name, composes] = type(name, (Node,), {"__slots__": (), "composes": composes})
    return cls


def named(node):
    """Decorator: the op's result records torch's node ``node`` (a name, or a function of the call's arguments
    giving it, or None to keep the node's own) where the op is a composition whose last node is named otherwise
    (``rsqrt`` ends with a ``reciprocal``, torch records ``RsqrtBackward0``).  Only the name changes: the node's
    rule, saved values and edges are the composition's; a result the op did not record (an input handed back)
    keeps its node.  Each tensor of a tuple result is named so (torch's one node of ``aminmax``, ``cummax``)."""
    def wrap(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            since = mark()
            out = fn(*args, **kwargs)
            name = node(*args, **kwargs) if callable(node) else node
            if name is not None:  # (None: an overload torch names otherwise)
                for t in out if isinstance(out, tuple) else (out,):
                    if isinstance(t, Tensor):
                        relabel(t, name, since)
            return out
        return op
    return wrap


def _new_node(name):
    cls = _node_classes.get(name) or node_class(name)
    node = cls.__new__(cls)
    node._seq = next(_made)
    node._saved, node._had_saved, node._tensor_hooks = None, False, {}
    node._retained, node._hooks, node._prehooks, node._stack = None, {}, {}, None
    node._guards = ()
    return node


def accumulate_node(t) -> AccumulateGrad:
    """The one AccumulateGrad node of leaf ``t`` (made on first use, then cached)."""
    node = t._accumulate_node() if t._accumulate_node is not None else None
    if node is None:
        node = _new_node("AccumulateGrad")
        node.variable, node.next_functions, node._prim, node._params = t, (), None, {}
        node._input_meta, node._output_meta = (), _meta(t._storage.value)
        t._accumulate_node = weakref.ref(node)
    return node


def edge(t):
    """Where a gradient for input ``t`` flows: its grad_fn, its AccumulateGrad, or nowhere."""
    if t is None or not getattr(t, "requires_grad", False):
        return None
    return t.grad_fn if t.grad_fn is not None else accumulate_node(t)


# ------------------------------------------------------------------- primitives
PRIMITIVES: dict[str, "Primitive"] = {}  # every differentiable op, by name: what the coverage test walks


class Primitive:
    """One differentiable op, declared once with its forward (JAX's ``impl_rules``, HIPS's ``primitive``).

    ``torch``: torch's node name, or the names of the op's variants (the op picks one when it
    binds: ``SumBackward0`` over all axes, ``SumBackward1`` over some); ``None`` for ops whose node
    is named at bind time (a user's ``Function`` or ``map_blocks`` kernel).

    ``impl(*operands, **params)``: the forward on dask arrays (recorded, and run when the program is lowered to
    dask); an operand that is a Python number arrives as itself.  ``args``: the operands' names.  ``save``: what the
    rule reads, by name: an operand (tensor or Python number) or ``"r"``, the result; ``(name, i)`` saves the
    operand only when input ``i`` needs a gradient.  ``consts``: the last operands, by name, that the forward reads
    but that are no inputs of the node (no edge, no cotangent), as torch's ``IndexBackward0`` keeps its indices: a
    mask or index tensor the op derives and saves, or a number (``alpha``, ``value``) the forward reads as a value
    in memory, so that a program differing only in it (a step size) is the same program.  ``prepare(*inputs)``:
    coerces and checks the operands (the op modules' families supply it), returning them. ``elementwise``:
    ``impl`` is an operator or ufunc applied elementwise, whose abstract value and layer :mod:`daskgrad._dask`
    makes without a dask call.
    ``view``: a :class:`View` for torch's view ops, whose result shares its input's storage (see
    :mod:`daskgrad.ops.views`).  ``promote``: the forward reads its operands cast to torch's result
    type of them (``"common"``), or to a floating one (``"floating"``: ``div``, ``exp``); see :func:`promoted`.
    ``opmath``: where that type and the first operand's are float16, the forward computes in float32 and
    rounds once, as torch's ``mul`` and ``div`` do: a second operand that is a Python number or a 0-d
    tensor is not rounded to half first (``f16 * 1e5`` is 49984, not inf).

    ``@p.vjp`` registers ``rule(g, s, **params)``: ``g`` the output cotangent, ``s.<name>`` a saved
    value, ``params`` the plain values the op bound; it returns one cotangent per input, ``None``
    meaning zero.
    """

    __slots__ = ("name", "torch", "rule", "impl", "args", "save", "consts", "prepare", "elementwise",
                 "view", "promote", "opmath", "_plan")

    def __init__(self, name, torch=None, *, impl=None, args=("x",), save=(), consts=(),
                 prepare=None, elementwise=False, view=None, promote=None, opmath=False):
        if name in PRIMITIVES:
            raise ValueError(f"primitive {name!r} is declared twice")
        self.name = name
        self.torch = (torch,) if isinstance(torch, str) else tuple(torch or ())
        self.rule = None
        self.impl, self.args, self.save, self.prepare = impl, tuple(args), tuple(save), prepare
        self.consts, self.elementwise, self.view = tuple(consts), elementwise, view
        self.promote, self.opmath = promote, opmath
        try:  # what bind saves, by name: (name, the operand's place or -1 for the result, when), read once here
            self._plan = tuple((n, -1 if n == "r" else self.args.index(n), w) for n, w in
                               (e if isinstance(e, tuple) else (e, None) for e in self.save))
        except ValueError:
            self._plan = None  # (a name that is no operand: bind raises as it did, on its first call)
        PRIMITIVES[name] = self

    def __repr__(self):
        return f"primitive({self.name!r}, torch={self.torch!r})"

    def vjp(self, rule):
        self.rule = rule
        return rule

    def bind(self, *inputs, node=None, **params):
        """Apply the op: coerce and check ``inputs``, record ``impl`` on their values (not built yet:
        :func:`daskgrad._dask.defer`), save what the rule reads, record.  ``node`` picks one of the
        declared torch names."""
        # (every recorded op passes here: a loop's small ops cost what this costs, so it reads each thing once)
        if self.prepare is not None:
            inputs = self.prepare(*inputs)
        plain = _modes.trace is None  # (then a plain tensor's value is what recorded() reads, without the call)
        values, tensors, needs = [], [], []  # (one pass: each operand's value, tensor or None, and wish for grad)
        for x in inputs:
            if isinstance(x, Tensor):
                values.append(x._storage.value if plain and type(x) is Tensor else recorded(x))
                tensors.append(x)
                needs.append(x._requires_grad)
            else:
                values.append(x)
                tensors.append(None)
                needs.append(False)
        half, consts = False, self.consts
        if self.promote is not None:  # (the operands, not the constants: an index, a scale)
            if consts:
                k = len(values) - len(consts)
                values[:k], half = promoted(values[:k], floating=self.promote == "floating", opmath=self.opmath)
            else:
                values, half = promoted(values, floating=self.promote == "floating", opmath=self.opmath)
        if consts:  # (a real number read as a value in memory: a step size changing every step keeps the key)
            k = len(values) - len(consts)
            values[k:] = [door.Constant(np.float64(v) if isinstance(v, float) else np.int64(v))
                          if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in values[k:]]
        items = tuple(params.items())
        value = out = door.defer(self.impl, values, items, elementwise=self.elementwise)
        if half:
            out = rounded_to_half(out)
        save = {}
        if self.save:
            plan = self._plan
            if plan is None:
                plan = [(n, -1 if n == "r" else self.args.index(n), w) for n, w in
                        (e if isinstance(e, tuple) else (e, None) for e in self.save)]
            for name, i, when in plan:
                save[name] = (RESULT if i < 0 else inputs[i]) if when is None or needs[when] else None
        if consts:
            k = len(inputs) - len(consts)
            inputs, tensors, needs = inputs[:k], tensors[:k], needs[:k]
        if node is None:
            node = self.torch[0]
        elif self.torch and node not in self.torch:
            raise ValueError(f"{node} is not a node name of {self!r}")
        out = _record(node, out, tensors, needs, self, save, params)
        if items and out.grad_fn is not None and type(value) is door.Lazy and value.params is items:
            out.grad_fn._fparams = value.frozen_params  # (frozen once: the kept reverse pass's key reads them)
        if self.view is not None:  # torch's view op: the result shares the input's storage
            as_view(out, inputs[0], self, node, params)
        return out

    def record(self, out_array, *inputs, save=None, node=None, **params):
        """Wrap ``out_array``, made by the caller, as a Tensor recorded as this op on ``inputs``
        (``None`` for a constant operand): the path of ops whose forward does not fit ``impl``.
        ``save`` maps a name to a tensor, a Python number, ``RESULT`` (the output) or ``None``;
        ``params`` are plain values (ints, tuples, strings, dtypes, shapes, chunks, numbers)
        handed back to the rule as keywords."""
        if node is None:
            node = self.torch[0]
        elif self.torch and node not in self.torch:
            raise ValueError(f"{node} is not a node name of {self!r}")
        return record(node, out_array, inputs, self, save, params)

    def label(self, node) -> str:
        """The name of the rule's layers on the dashboard: ``<label>-vjp-<token>``."""
        if self.torch:
            return self.name
        return re.sub(r"(?<!^)(?=[A-Z])", "_", re.sub(r"Backward\d*$", "", node.name())).lower()


class View:
    """What makes a primitive one of torch's view ops, whose result shares its input's storage and
    version counter (``x[0]``, ``x.T``, ``x.view(-1)`` ...).  ``layout(shape, strides, offset,
    out_shape, **params)``: the result's strides and storage offset, in elements, from its input's,
    as torch computes them, or ``None`` where torch copies instead (``reshape`` of a tensor it cannot
    view).  ``put(a, new, **params)``: the op's inverse on dask arrays, ``a`` with the part its view
    sees replaced by ``new`` (a write through the view, functionalized onto the base).  For an op
    whose view reads an element several times (``expand``), ``put`` may take any copy (all were
    written, with one value: ``fill_``), and ``gather(a, new, written, **params)`` puts only the
    copies ``written`` (a boolean array) holds, returning ``a`` so written and where it was."""

    __slots__ = ("layout", "put", "gather")

    def __init__(self, layout, put, gather=None):
        self.layout, self.put, self.gather = layout, put, gather


def primitive(name, torch=None, **forward) -> Primitive:
    return Primitive(name, torch, **forward)


def promoted(values, floating=False, opmath=False):
    """An op's operand values (arrays and numbers) with each array cast to torch's result type of them all
    (:func:`daskgrad._data.result_type`), where NumPy's differs: float32 with int64 is float32, an integer
    with 2.5 the default float, an integer divided by one too.  Numbers stay numbers: NumPy keeps them weak
    beside an array of their category or higher, as torch does.  The cast is the forward's only: the
    node reads its operands as they are, and the engine gives each cotangent its operand's dtype, as
    torch's nodes do (torch records no cast node either).  Returns the values and whether the result,
    computed in float32, is to be rounded to half (``opmath``: a float16 result, see :class:`Primitive`)."""
    # (the common case, one dtype and weak numbers: nothing to cast, no promotion to run; one pass)
    dtype, widest = None, 0  # widest: the widest kind of number among the operands (_RANK), 4 for anything else
    for v in values:
        rank = _RANK.get(type(v))
        if rank is not None:
            if rank > widest:
                widest = rank
        elif hasattr(v, "dtype"):
            if dtype is None:
                dtype = v.dtype
            elif v.dtype != dtype:
                break
        else:
            widest = 4
    else:
        if dtype is not None:
            kind = dtype.kind
            if (not floating or kind in "fc") and widest <= _WEAK_RANK.get(kind, 0) \
                    and not (opmath and dtype == _HALF) and (kind not in "iu" or _ints_fit(values, dtype)):
                return values, False
    dtype = result_type(*values, floating=floating)
    if dtype.kind in "iu":  # (a Python int beyond the dtype's range wraps into it, as torch's)
        values = [wrapped_int(v, dtype) if type(v) is int else v for v in values]
    half = opmath and dtype == _HALF and getattr(values[0], "dtype", None) == _HALF
    if half:  # (each operand cast straight to float32: a float32 or float64 0-d one is not rounded to half first;
        # as torch's, only a second operand: a number or 0-d tensor first is rounded to half, ``1e5 // t`` is NaN)
        dtype = _FLOAT
        # (an integer or bool operand with dimensions is cast to half first, as torch's TensorIterator casts it to
        # the common dtype: ``h * i`` of a large int32 ``i`` is inf; a 0-d one is read as float32, a CPU scalar)
        values = [door.defer(_cast, (v,), (("dtype", _HALF),)) if getattr(v, "ndim", 0) and v.dtype.kind in "biu"
                  else v for v in values]
    return [door.defer(_cast, (v,), (("dtype", dtype),)) if hasattr(v, "dtype") and v.dtype != dtype else v
            for v in values], half


_HALF, _FLOAT = np.dtype(np.float16), np.dtype(np.float32)
_PLAIN = frozenset({float, int, bool, type(None)})  # (operands recorded as they are)


def _ints_fit(values, dtype):
    ints = [v for v in values if type(v) is int]
    if not ints:
        return True
    low, high = int_range(dtype)
    return all(low <= v <= high for v in ints)


def rounded_to_half(value):
    """An opmath forward's float32 result rounded to float16 (see :func:`promoted`)."""
    return door.defer(_cast, (value,), (("dtype", _HALF),))


_WEAK = {"f": (bool, int, float), "c": (bool, int, float, complex), "i": (bool, int), "u": (bool, int)}
_RANK = {type(None): 0, bool: 1, int: 1, float: 2, complex: 3}  # (a number's place in _WEAK's rows)
_WEAK_RANK = {"f": 2, "c": 3, "i": 1, "u": 1}  # (the widest number weak beside an array of that kind)


def _cast(a, *, dtype):
    return a.astype(dtype)


# ------------------------------------------------------------------------ record
def record(name, out_array, inputs, prim, save=None, params=None):
    """Wrap ``out_array`` as a Tensor and, if anything needs grad, attach a node (see
    :meth:`Primitive.record`, the one caller)."""

    # one pass over the inputs (a deep chain records hundreds of thousands of ops: see test_deep_graphs)
    return _record(name, out_array, inputs, [isinstance(t, Tensor) and t._requires_grad for t in inputs], prim,
                   save, params)


def _record(name, out_array, inputs, wanting, prim, save, params):
    """:func:`record` where ``wanting`` (which of ``inputs`` require grad) is known."""
    out = Tensor._make(out_array)
    if not _modes.grad or not any(wanting):
        return out
    v = out._storage.value
    _attach(out, name, inputs, wanting, prim, save, params, (v.shape, v.dtype, v.chunks))
    return out


def rebase(t, name, inputs, prim, params, meta):
    """Give ``t`` a new node ``name`` of ``prim`` on ``inputs``, in any grad mode, without reading its
    value: torch's history of a view rewritten after an in-place write to its base
    (``AsStridedBackward0``; a base that no longer requires grad, after ``detach_()``, is an edge to
    nothing, as torch's).  ``meta``: (shape, dtype, chunks) of ``t``."""
    _attach(t, name, inputs, [x.requires_grad for x in inputs], prim, None, params, meta)
    return t.grad_fn


def _attach(out, name, inputs, wanting, prim, save, params, out_meta):
    node = _new_node(name)
    node._prim, node._params, node._fparams = prim, params or {}, None
    edges, metas = [], []  # (one loop: every recorded op passes here)
    for t, w in zip(inputs, wanting):
        if w:  # (requires grad: its grad_fn, or its leaf's AccumulateGrad, as edge() gives)
            edges.append((t.grad_fn if t.grad_fn is not None else accumulate_node(t), 0))
            v = t._storage.value
            metas.append((v.shape, v.dtype, v.chunks))
        else:
            edges.append((None, 0))
            metas.append(None)
    node.next_functions, node._input_meta = tuple(edges), tuple(metas)
    node._output_meta = out_meta
    out.grad_fn, out._requires_grad = node, True
    if save:
        save_tensors(node, {k: out if v is RESULT else v for k, v in save.items()}, out)
    else:
        node._saved = {}
    if _modes.anomaly:
        frames = traceback.extract_stack()
        while frames and frames[-1].filename == __file__:  # record and bind
            frames.pop()
        frames.pop()  # and the op that bound
        while frames and frames[-1].filename in _WRAPPERS:  # and its public wrapper or method: the user's line last
            frames.pop()
        node._stack = traceback.format_list(frames)


def _meta(value):
    """(shape, dtype, chunks) of a tensor's value: what a cotangent for it must have."""
    return value.shape, value.dtype, value.chunks


def save_tensors(node, save, out=None):
    """Attach the saved values of ``node``: tensors, ``None``, or a Python number operand, which
    holds no memory; any other plain value is a param, so that :meth:`Node.release` frees every
    tensor the rule could read."""
    saved, tensors = {}, []
    for k, v in save.items():
        if isinstance(v, Tensor):
            tensors.append(v)
        elif v is not None and type(v) not in _PLAIN and not isinstance(v, numbers.Number):
            raise TypeError(f"{node.name()} saves {k!r} of type {type(v).__name__}: only tensors are saved, "
                            "plain values are params")
        saved[k] = v
    if not saved:
        node._saved = {}
        return
    if tensors:
        for v in tensors:
            if v._storage.inference:
                raise RuntimeError(INFERENCE_SAVE_MESSAGE)
        consumer = weakref.ref(node)
        for k, v in save.items():  # (the same keys, in the same order, as saved's)
            if isinstance(v, Tensor):
                saved[k] = SavedTensor(v, v is out, consumer)
    node._saved, node._had_saved = saved, True
    for seen in _watching.lists:
        seen.extend(tensors)


def guard(out, *inputs):
    """``out`` (a composite op's result: several recorded ops), whose backward raises torch's in-place
    error if any of ``inputs`` is written in place before the backward reaches it, as torch's single op,
    which saves those inputs, does.  A composition saves values made *from* the inputs (snapshots,
    never changed by a later write), so without this a write after ``sinc(x)`` would give the gradient
    of the old ``x`` where torch raises.  Only the versions are kept, not the values: no memory held.
    (An in-place form writes the input its result guards: ``Tensor._inplace`` drops that guard.)"""
    node = out.grad_fn if isinstance(out, Tensor) else None
    if node is None:
        return out
    kept = [SavedTensor.version_of(t, node) for t in inputs
            if isinstance(t, Tensor) and t is not out and (t.grad_fn is None or t.grad_fn is not node)]
    if kept:
        node._guards = node._guards + tuple(kept)
    return out


class _Watching(threading.local):
    lists = ()  # told every tensor saved in this thread (see watch_saved)


_watching = _Watching()


class watch_saved:
    """``with watch_saved() as saved:`` -- ``saved`` lists the tensors saved for backward while
    inside, in the order they were saved (where torch's saved-tensor pack hook sees each);
    activation checkpointing compares a region's two runs with it.  Nests."""

    def __enter__(self):
        self.saved = []
        _watching.lists = _watching.lists + (self.saved,)
        return self.saved

    def __exit__(self, *exc):
        _watching.lists = tuple(x for x in _watching.lists if x is not self.saved)


RESULT = object()  # marker: "save this op's own output"
# the files of the public ops' wrapper (torch's keywords, out=) and of torch's methods: frames between an op
# and the line that called it
_WRAPPERS = {os.path.join(os.path.dirname(__file__), "ops", name) for name in ("__init__.py", "methods.py",
                                                                         "index_writes.py")}


def toposort(roots):
    """Nodes reachable from ``roots`` with every node after all nodes that feed it.

    Iterative child counting (HIPS autograd's ``toposort``), so deep graphs are fine.
    """
    deps: dict[Node, int] = {}
    stack = list(dict.fromkeys(r for r in roots if r is not None))  # a root given twice counts once
    seen = set(stack)
    while stack:
        n = stack.pop()
        for child, _ in n.next_functions:
            if child is None:
                continue
            deps[child] = deps.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    ready = [r for r in dict.fromkeys(roots) if r is not None and deps.get(r, 0) == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for child, _ in n.next_functions:
            if child is None:
                continue
            deps[child] -= 1
            if deps[child] == 0:
                ready.append(child)
    return order
