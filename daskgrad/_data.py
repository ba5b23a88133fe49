"""Where a tensor's data comes from: torch's dtype rules for Python data, and which sources are lazy.

``daskgrad.tensor`` copies data that is in memory already (Python lists and scalars, NumPy and
cupy arrays, torch tensors) and infers its dtype as ``torch.tensor`` does; ``daskgrad.from_array``
wraps lazy sources (dask arrays, Zarr arrays, h5py datasets, xarray objects) without reading them.
This module tells those apart and holds torch's inference; it imports nothing of daskgrad.
"""
from __future__ import annotations

import functools

import numpy as np

DEFAULT_FLOAT = np.dtype("float32")  # torch.get_default_dtype()
DEFAULT_COMPLEX = np.dtype("complex64")  # the complex dtype of that default

# packages whose arrays read their values from disk or a graph only when indexed
LAZY_PACKAGES = frozenset({"zarr", "h5py", "xarray", "netCDF4", "tiledb", "tensorstore"})
TORCH_TYPE_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half", "complex64": "ComplexFloat",
                    "complex128": "ComplexDouble", "int64": "Long", "int32": "Int", "int16": "Short",
                    "int8": "Char", "uint8": "Byte", "bool": "Bool"}
_KINDS = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}  # torch's categories: bool < integer < float < complex
_SUPPORTED = ("float64, float32, float16, complex64, complex128, int64, int32, int16, int8, uint64, uint32, uint16, "
              "uint8, and bool")


def package(x) -> str:
    return type(x).__module__.split(".")[0]


def is_torch(x) -> bool:
    """A ``torch.Tensor`` (or a subclass: ``nn.Parameter``), recognised without importing torch."""
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(x).__mro__)


def is_lazy(x) -> bool:
    """A dask collection or an array of a package that reads values only when indexed (Zarr, h5py, xarray ...)."""
    if package(x) in LAZY_PACKAGES:
        return True
    graph = getattr(x, "__dask_graph__", None)
    return callable(graph) and not isinstance(x, type)


def is_array(x) -> bool:
    """An in-memory NumPy or cupy array (both implement ``__array_function__``; lazy ones are told apart first)."""
    return isinstance(x, np.ndarray) or (package(x) == "cupy" and hasattr(x, "__array_function__"))


def np_dtype(dtype):
    """``dtype`` as a NumPy dtype; torch's dtypes (``torch.float64``) are read by name."""
    if dtype is None:
        return None
    if package(dtype) == "torch":
        return np.dtype(str(dtype).removeprefix("torch."))
    return np.dtype(dtype)


def check_supported(dtype) -> None:
    """torch's TypeError for a NumPy array torch cannot hold (object, strings, datetimes)."""
    if dtype.kind not in _KINDS:
        raise TypeError(f"can't convert np.ndarray of type numpy.{dtype.type.__name__}. The only supported types "
                        f"are: {_SUPPORTED}.")


def promote(a, b):
    """``torch.promote_types``: within a category NumPy's promotion; across categories the higher
    category's dtype (int64 with float32 gives float32, where NumPy gives float64)."""
    if a is None:
        return b
    ka, kb = _KINDS[a.kind], _KINDS[b.kind]
    if ka == kb or min(ka, kb) >= 2:  # same category, or float with complex (complex of the wider float)
        return np.promote_types(a, b)
    return a if ka > kb else b


def result_type(*operands, floating=False):
    """``torch.result_type`` of an op's operands: arrays and tensors (anything with ``dtype`` and
    ``ndim``) and Python numbers.  Three classes, each promoted within itself: operands with
    dimensions, 0-d ones, and numbers (a float is the default float, an int int64).  A lower class
    counts only where it is of a higher category (float32 with a float64 0-d operand is float32, an
    int64 tensor with 2.5 is float32); NumPy promotes every operand alike (both give float64).
    ``floating``: a floating op's (``div``, ``exp``), whose integer or bool result is the default float."""
    dims = zero = number = None
    for x in operands:
        if hasattr(x, "dtype"):
            if x.ndim:
                dims = promote(dims, np.dtype(x.dtype))
            else:
                zero = promote(zero, np.dtype(x.dtype))
        elif x is not None:
            number = promote(number, _scalar_dtype(x))
    dtype = _over(dims, _over(zero, number))
    return DEFAULT_FLOAT if floating and dtype.kind in "biu" else dtype


def can_cast(src, dst):
    """torch's ``can_cast``, what an in-place op or ``out=`` may write: not complex into a real dtype, a
    float into an integer, nor anything but a bool into a bool (NumPy's ``same_kind`` refuses int64 into
    uint8 as well, which torch writes, wrapping)."""
    ks, kd = _KINDS[np.dtype(src).kind], _KINDS[np.dtype(dst).kind]
    return not (ks == 3 and kd < 3 or ks == 2 and kd < 2 or ks >= 1 and kd == 0)


# torch's C++ names of the dtypes, in its "value cannot be converted to type ... without overflow"
C_TYPE_NAMES = {"float16": "c10::Half", "float32": "float", "float64": "double", "int64": "int64_t", "int32": "int",
                "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool",
                "complex64": "c10::complex<float>", "complex128": "c10::complex<double>"}


def checked_scalar(value, dtype):
    """``value``, a Python number an op converts to ``dtype`` as torch's ``Scalar::to<T>()`` does where it
    checks (``fill_``, ``clamp``'s bounds, ``alpha``, a ``pow`` exponent, ``masked_fill``): one out of the
    dtype's range raises torch's error; infinities and NaN pass into floating types only; a negative int
    into an unsigned type wraps (down to minus its maximum).  Returns the number to use."""
    dtype = np.dtype(dtype)
    if isinstance(value, np.generic) and not isinstance(value, np.bool_):  # (a NumPy number: checked as torch's)
        value = value.item()
    if type(value) is int and not -(1 << 63) <= value < 1 << 63:  # (torch's Scalar: an int64 or a uint64)
        if value >= 1 << 64 or value < 0:
            raise OverflowError("int too big to convert" if value > 0 else "can't convert negative int to unsigned")
        if dtype.kind in "fc":
            value = float(value)
    if type(value) is complex and dtype.kind != "c" and value.imag == 0:
        value = value.real
    if dtype.kind == "c" and type(value) in (int, float, complex):  # (each part in range of the parts' dtype)
        part = np.finfo(dtype).max
        if not all(v != v or abs(v) == float("inf") or abs(v) <= part for v in (value.real, value.imag)):
            raise RuntimeError(f"value cannot be converted to type {C_TYPE_NAMES[dtype.name]} without overflow")
        return value
    if type(value) not in (int, float):
        if type(value) is complex and dtype.kind != "c":  # (torch's overflow for a lost imaginary part)
            raise RuntimeError(f"value cannot be converted to type {C_TYPE_NAMES.get(dtype.name, dtype.name)} "
                               "without overflow")
        return value
    if dtype.kind == "u" and type(value) is int and -np.iinfo(dtype).max <= value < 0:
        return value % (1 << dtype.itemsize * 8)  # (torch wraps a negative int into an unsigned type: -3 is 253)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        fits = value == value and abs(value) != float("inf") and info.min <= value <= info.max
    elif dtype.kind == "f":
        fits = value != value or abs(value) == float("inf") or abs(value) <= float(np.finfo(dtype).max)
    else:
        fits = True
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {C_TYPE_NAMES.get(dtype.name, dtype.name)} "
                           "without overflow")
    return value


@functools.lru_cache(maxsize=None)
def int_range(dtype):
    """``(min, max)`` of an integer dtype, as Python ints (``np.iinfo`` costs microseconds a call)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def wrapped_int(value, dtype):
    """A Python int an integer op reads in ``dtype``, wrapped into its range as torch's arithmetic and
    comparisons wrap a number (``uint8 + 300`` adds 44; NumPy refuses it)."""
    low, high = int_range(dtype)
    if low <= value <= high:
        return value
    return (value - low) % (high - low + 1) + low


def _over(higher, lower):
    """torch's ``combine_categories``: the higher class's dtype unless the lower one's category is higher."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    kh, kl = _KINDS[higher.kind], _KINDS[lower.kind]
    if kh == 3 or kh == 2 and kl < 3:
        return higher
    if kl == 3:  # a complex number with a float tensor: the complex of that float (float32 + 1j: complex64)
        return np.result_type(higher, np.complex64) if kh == 2 else lower
    return promote(higher, lower) if higher.kind == "b" or kl == 2 else higher


def _scalar_dtype(x):
    """The dtype torch infers for one element (None for an empty sequence)."""
    if isinstance(x, (np.generic, np.ndarray)) or is_torch(x) or package(x) == "cupy":
        dtype = np_dtype(x.dtype)  # (before Python's types: np.float64 is a float, and keeps its dtype)
        check_supported(dtype)
        return dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, int):
        return np.dtype(np.int64)
    if isinstance(x, float):
        return DEFAULT_FLOAT
    if isinstance(x, complex):
        return DEFAULT_COMPLEX
    if isinstance(x, str):
        raise TypeError("new(): invalid data type 'str'")
    raise RuntimeError(f"Could not infer dtype of {type(x).__name__}")


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple)) or (
        (isinstance(x, np.ndarray) or is_torch(x) or package(x) == "cupy") and x.ndim > 0)


def infer(data):
    """``(shape, dtype)`` of Python data (nested lists and tuples of scalars, NumPy scalars and arrays,
    torch tensors) by ``torch.tensor``'s rules: the shape follows first elements, every element's
    dtype is promoted in (Python floats are float32, ints int64), and a ragged list raises torch's
    ValueError."""
    shape = []
    x = data
    while _is_sequence(x):
        shape.append(len(x))
        if not len(x):
            break
        x = x[0]
    return tuple(shape), _walk(data, shape, 0) or DEFAULT_FLOAT


def _walk(x, shape, dim):
    if dim == len(shape):
        if _is_sequence(x):
            raise TypeError(f"'{type(x).__name__}' object cannot be interpreted as a scalar of a tensor "
                            f"with {len(shape)} dimensions")
        return _scalar_dtype(x)
    if not _is_sequence(x):
        raise TypeError("not a sequence")
    if not isinstance(x, (list, tuple)):  # an array inside the list: its dtype, no walk over its elements
        for d, (want, got) in enumerate(zip(shape[dim:], x.shape), dim):
            if want != got:
                raise ValueError(f"expected sequence of length {want} at dim {d} (got {got})")
        if x.ndim != len(shape) - dim:
            raise ValueError(f"expected a tensor of {len(shape) - dim} dimensions at dim {dim} (got {x.ndim})")
        return _scalar_dtype(x)
    if len(x) != shape[dim]:
        raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} (got {len(x)})")
    dtype = None
    for item in x:
        d = _walk(item, shape, dim + 1)
        dtype = d if dtype is None else (dtype if d is None else promote(dtype, d))
    return dtype


class device(str):
    """torch's ``torch.device``: ``device("cuda:0")``, ``device("cuda", 0)``, ``device("cpu")``, with ``.type``
    and ``.index``.  Also a str, equal to its text (``t.device == "cpu"``), which torch's is not."""

    def __new__(cls, type, index=None):
        if isinstance(type, device) and index is None:
            return type
        text = str(type)
        kind, _, number = text.partition(":")
        if kind not in ("cpu", "cuda") or (number and not number.isdigit()):
            raise RuntimeError("Expected one of cpu, cuda device type at start of device string: " + text)
        if number:
            if index is not None:
                raise RuntimeError("type (string) must not include an index because index was passed explicitly: "
                                   + text)
            index = int(number)
        self = super().__new__(cls, kind if index is None else f"{kind}:{index}")
        self.type, self.index = kind, index
        return self

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __reduce__(self):
        return device, (self.type, self.index)


class memory_format:
    """torch's memory formats (``daskgrad.contiguous_format``, ...), taken by ``to``, ``clone``, ``float``...
    and ignored: a chunked array has no strides, so every layout holds the same values."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"daskgrad.{self.name}"


contiguous_format, preserve_format = memory_format("contiguous_format"), memory_format("preserve_format")


class layout:
    """torch's ``torch.layout``: how a tensor's elements are held.  Every daskgrad tensor is dense chunks:
    ``t.layout`` is ``daskgrad.strided``, torch's default (and its sparse layouts have no counterpart)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"daskgrad.{self.name}"

    def __reduce__(self):
        return self.name  # (the module's instance: unpickled as itself, ``is`` comparisons hold)


strided = layout("strided")
channels_last, channels_last_3d = memory_format("channels_last"), memory_format("channels_last_3d")
