"""Checkpoints that hold values: ``daskgrad.save`` and ``daskgrad.load``, torch.save/torch.load for
chunked tensors.

>>> dg.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, "ckpt")
>>> ck = dg.load("ckpt"); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])
<All keys matched successfully>

Layout: ``save`` always writes a directory (whatever its name ends with, ``.pt`` included) that is a
Zarr (format 3) group:

* one Zarr array per tensor, written chunk by chunk by the workers that hold the chunks, in
  parallel (nothing is gathered on the client).  A tensor reached through dicts, lists and tuples
  is named by its path there (``ckpt/model/0.weight``, ``ckpt/optim/state/0/exp_avg``); a key that
  cannot be a Zarr name (it holds ``/``, starts with ``__``, or the name is taken) gives
  ``tensor-N``.  Zarr wants regular chunks, so a tensor with uneven chunks is written with the
  largest chunk of each dimension; its own chunks are kept in the array's attributes
  (``attrs["daskgrad"] = {"chunks", "requires_grad", "parameter", "device"}``) and restored on load.
  Chunks on a GPU (cupy) are copied to the host, one chunk at a time on its worker, to be written.
  Every chunk carries a CRC32C checksum (Zarr's ``crc32c`` codec) and every chunk is written, even
  one of zeros, so that ``load`` tells a changed or missing chunk file from a value;
* ``structure.pkl``, a 1-d uint8 Zarr array (so the directory stays a clean Zarr hierarchy): the
  bytes of a pickle of everything else (dicts, lists, numbers, strings, the step count, even a whole
  Module) in which each tensor is a pickle *persistent id*, its array's name -- the mechanism
  torch.save uses for its storages.  Tensors sharing a storage stay sharing it, as torch.save's: one
  array holds the storage (its tensor's, or ``tensor-N`` when only views of it are saved), and a view
  is the id ``("view", n, array, view ops, requires_grad, parameter)``, its view ops done again on
  load (a write to one then shows in the others; strides and offsets as saved).

**Atomic**: ``save`` writes the whole checkpoint into a new directory next to ``path``
(``.NAME.saving-HOST-PID-N``) and swaps it in by one rename (an exchange, where the file system has
one) once every chunk and the structure are written; the previous checkpoint is deleted after.  A
save that raises, or a process killed while saving, leaves the previous checkpoint as it was (and,
if killed, its unfinished directory, which the next save of that path from the host removes).

**Safe**: ``load`` reads the structure with :mod:`daskgrad.serialization`'s unpickler, which builds
only containers, numbers, strings, dtypes and the tensors (``weights_only=True``, torch.load's
default since PyTorch 2.6); a checkpoint holding anything else (a whole Module) is refused with
torch's words unless loaded with ``weights_only=False`` -- only for a file you trust.

Without daskgrad, ``zarr.open_group("ckpt")["model/0.weight"][:]`` reads a tensor's values, and
``pickle.Unpickler(io.BytesIO(zarr.open_array("ckpt", path="structure.pkl")[:].tobytes()))`` with
``persistent_load = lambda name: zarr.open_array("ckpt", path=name)`` reads the whole object (a
plain unpickler runs what the file names: trusted files only).

``load`` reads a checkpoint directory back, or a torch file (``torch.save(model.state_dict(), "m.pt")``,
through ``torch.load`` when torch is installed) into daskgrad tensors.  It reads every value into
memory -- the cluster's when a distributed Client is current (the chunks land on the workers, through
:func:`daskgrad.runtime.persist`, the one path for values the library keeps there), this process's
otherwise -- so the tensors do not depend on the files afterwards, as after torch.load.  The path
must be one the workers can read and write (a shared file system on a multi-node cluster).
"""
from __future__ import annotations

import ctypes
import io
import itertools
import json
import os
import pickle
import shutil
import socket
import uuid
from collections import OrderedDict

import dask
import dask.array as da
import numpy as np

from . import _dask as door, runtime
from .graph import PRIMITIVES
from ._modes import no_grad
from ._tensor import Tensor, _ViewStorage
from .nn.module import Parameter
from .serialization import WeightsUnpickler

STRUCTURE = "structure.pkl"
_FORMAT = 2  # 1: no checksums, chunks of zeros not written (still read)
_SAVING = ".saving-"  # in the name of a save's unfinished directory: .NAME.saving-HOST-PID-N


def _zarr():
    try:
        import zarr
    except ImportError:
        raise ImportError('daskgrad.save and daskgrad.load of checkpoints need zarr: pip install "daskgrad[io]"') \
            from None
    return zarr


def _array_options():
    """How every array is written: Zarr's default compressor with a CRC32C checksum after it, and
    every chunk written (Zarr skips chunks equal to the fill value: a missing file would read as zeros)."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return {"compressors": [ZstdCodec(level=0), Crc32cCodec()], "config": {"write_empty_chunks": True}}


# ------------------------------------------------------------------------ save
def save(obj, path) -> None:
    """Write ``obj`` (tensors in dicts/lists/tuples, state_dicts, any picklable object holding tensors)
    to the directory ``path`` (see the module docstring for the layout); an earlier checkpoint there is
    replaced once the new one is complete (never a directory that is not a checkpoint).  Pending
    updates (an optimizer step not yet run) are computed first, once."""
    zarr = _zarr()
    path = os.fspath(path)
    _check_target(path)
    tensors = {}  # array name -> tensor
    structure = _dumps(obj, _readable_names(obj), tensors)
    runtime.persist([])  # the step's lazy parameter updates: computed (and kept) once, not per write
    path = os.path.realpath(path)  # (a link to a checkpoint: the checkpoint is replaced, the link kept)
    _remove_unfinished(path)
    new = _unfinished(path)
    try:
        group = zarr.open_group(new, mode="w-", attributes={"daskgrad": {"format": _FORMAT, "structure": STRUCTURE,
                                                                           "checksums": "crc32c"}})
        writes = [_write(t, new, name) for name, t in tensors.items()]
        client = runtime.current_client()
        if client is not None:
            try:
                client.compute(writes, sync=True)
            except Exception as e:  # a tensor's values lost meanwhile: named, not dask's keys
                if door.cancelled(e):
                    runtime.raise_if_lost([t.array for t in tensors.values()], e)
                raise
        elif writes:
            dask.compute(*writes)
        data = np.frombuffer(structure, dtype=np.uint8)
        group.create_array(STRUCTURE, shape=data.shape, dtype=np.uint8, chunks=(max(data.size, 1),),
                           **_array_options())[:] = data
        _swap_in(new, path)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise


def _check_target(path):
    """Replace a checkpoint, never a directory that is something else."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise FileExistsError(f"{path} exists and is not a directory: daskgrad.save writes a directory")
    if os.listdir(path) and not _is_checkpoint(path):
        raise FileExistsError(f"{path} is a directory that is not a daskgrad checkpoint: not overwriting it")


def _is_checkpoint(path):
    return _attributes(path) is not None


def _attributes(path):
    """The checkpoint's own attributes (format, structure), or None if ``path`` holds no checkpoint."""
    try:
        with open(os.path.join(path, "zarr.json")) as f:
            return json.load(f).get("attributes", {}).get("daskgrad")
    except (OSError, ValueError, AttributeError):
        return None


_count = itertools.count()


def _unfinished(path):
    """A new directory next to ``path`` (the same file system: a rename swaps it in)."""
    head, name = os.path.split(os.path.abspath(path))
    return os.path.join(head, f".{name}{_SAVING}{socket.gethostname()}-{os.getpid()}-{next(_count)}-"
                              f"{uuid.uuid4().hex[:8]}")


def _remove_unfinished(path):
    """The unfinished directories a killed save of ``path`` on this host left (its process is gone)."""
    head, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}{_SAVING}{socket.gethostname()}-"
    for entry in os.listdir(head or "."):
        if not entry.startswith(prefix):
            continue
        try:
            pid = int(entry[len(prefix):].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(head, entry), ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def _swap_in(new, path):
    """``new`` renamed to ``path`` in one step; the checkpoint it replaces, deleted after."""
    if not os.path.lexists(path):
        try:
            os.rename(new, path)
            return
        except OSError:  # made meanwhile (another save): exchanged below
            pass
    elif os.path.isdir(path) and not os.listdir(path):
        os.rmdir(path)
        os.rename(new, path)
        return
    if _exchange(new, path):
        shutil.rmtree(new)  # (now the old checkpoint)
        return
    # no atomic exchange here: two renames (between them, for an instant, there is no checkpoint at path)
    old = new + "-old"
    os.rename(path, old)
    os.rename(new, path)
    shutil.rmtree(old)


def _exchange(a, b):
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where not available."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


class _Pickler(pickle.Pickler):
    """Pickles the structure; each tensor becomes a persistent id, the name of its Zarr array.  Tensors that share
    a storage, as torch.save keeps them: the storage's tensor (or, if none is saved, its value under a name of its
    own) is the array; a view of it, or another tensor over it (``detach()``), is the id ``("view", n, root, steps,
    requires_grad, parameter)``: the view ops from the root's value (:func:`_plain_steps`), done again on load, so
    that the loaded tensors share one storage again (a write to one shows in the others; strides and offsets as
    saved)."""

    def __init__(self, file, names, tensors):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.names, self.tensors, self.by_id = names, tensors, {}
        self.roots, self.stand_ins = {}, set()  # id(storage) -> its array's name; names of values with no tensor

    def persistent_id(self, obj):
        if not isinstance(obj, Tensor):
            return None
        pid = self.by_id.get(id(obj))
        if pid is None:  # a tensor saved twice is written once and loads as one tensor
            st = obj._storage
            steps = _plain_steps(st.steps) if type(st) is _ViewStorage else ()
            if steps:  # a view: the ops from its root's value
                root = st.root
                pid = ("view", len(self.by_id), self._root(root, None, self.roots.get(id(root))), steps,
                       bool(obj.requires_grad), isinstance(obj, Parameter))
            else:  # a tensor over a storage of its own (or a view whose ops are not plain: a copy, as before)
                name = self.roots.get(id(st))
                if name is None or name in self.stand_ins:
                    pid = self._root(st, obj, name)
                else:  # another tensor over the same storage (``detach()``)
                    pid = ("view", len(self.by_id), name, (), bool(obj.requires_grad), isinstance(obj, Parameter))
            self.by_id[id(obj)] = pid
        return pid

    def _root(self, st, owner, name):
        """The array name of storage ``st``'s value: ``owner``'s (the tensor over it, not a view), or a stand-in's
        until its owner comes."""
        if name is None:
            name = (owner is not None and self.names.get(id(owner))) or _free_name(self.names.values(), self.tensors)
            self.roots[id(st)] = name
            if owner is None:
                self.stand_ins.add(name)
                owner = Tensor._make(st.array)
            self.tensors[name] = owner
        elif owner is not None and name in self.stand_ins:  # the storage's own tensor, after a view of it
            self.stand_ins.discard(name)
            self.tensors[name] = owner
        return name


class _NotPlain(Exception):
    pass


def _plain(v):
    """A view op's parameter as plain tagged tuples (no class for the unpickler to build); raises _NotPlain."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return ("v", v)
    if isinstance(v, np.generic):
        return ("v", v.item())
    if isinstance(v, (tuple, list)):
        return ("t" if isinstance(v, tuple) else "l", tuple(map(_plain, v)))
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return ("m", tuple((k, _plain(x)) for k, x in v.items()))
    if isinstance(v, slice):
        return ("s", _plain(v.start), _plain(v.stop), _plain(v.step))
    if v is Ellipsis:
        return ("e",)
    if isinstance(v, np.dtype) and v.kind in "biufc":
        return ("d", v.str)
    if isinstance(v, type) and v.__name__ == "ndarray":  # a chunk type (a meta's): the loaded root's, on load
        return ("c",)
    raise _NotPlain


def _plain_steps(steps):
    """A view's ops from its root, as plain tuples, or None where a parameter is not plain (the view is then
    saved as a tensor of its own, as before)."""
    try:
        return tuple((prim.name, node if isinstance(node, str) else None, _plain(params))
                     for prim, node, params in steps)
    except _NotPlain:
        return None


def _unplain(v, chunk_type):
    tag = v[0]
    if tag == "v":
        return v[1]
    if tag in "tl":
        items = [_unplain(x, chunk_type) for x in v[1]]
        return tuple(items) if tag == "t" else items
    if tag == "m":
        return {k: _unplain(x, chunk_type) for k, x in v[1]}
    if tag == "s":
        return slice(*(_unplain(x, chunk_type) for x in v[1:]))
    if tag == "e":
        return Ellipsis
    if tag == "d":
        return np.dtype(v[1])
    if tag == "c":
        return chunk_type
    raise pickle.UnpicklingError(f"unsupported view parameter in a checkpoint: {v!r}")


def _view_of(root, steps, requires_grad, parameter):
    """The tensor ``steps`` (:func:`_plain_steps`) make of ``root``, sharing its storage (a fresh tensor over it
    for no steps, a Parameter where one was saved), as saved: its ``requires_grad`` set, no history."""
    chunk_type = type(root.array._meta)
    if not steps:
        t = (Parameter if parameter else Tensor).__new__(Parameter if parameter else Tensor)
        t._init(root._storage, None, bool(requires_grad))
        return t
    with no_grad():
        t = root.detach()
        for name, node, params in steps:
            t = PRIMITIVES[name].bind(t, node=node, **_unplain(params, chunk_type))
    if requires_grad and not t.requires_grad:
        t.requires_grad_(True)
    return t


def _dumps(obj, names, tensors):
    buf = io.BytesIO()
    _Pickler(buf, names, tensors).dump(obj)
    return buf.getvalue()


def _free_name(*taken):
    """``tensor-N``, neither an array nor a group (a prefix of a readable name) already."""
    names = [name for t in taken for name in t]
    n = 0
    while any(name == f"tensor-{n}" or name.startswith(f"tensor-{n}/") for name in names):
        n += 1
    return f"tensor-{n}"


def _walk(obj, path):
    if isinstance(obj, Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, path + (k,))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk(v, path + (i,))


def _valid_part(part):
    return bool(part) and "/" not in part and not part.startswith("__") and part not in (".", "..")


def _readable_names(obj):
    """id(tensor) -> its path through dicts/lists/tuples as a Zarr name, where that is one: unique,
    and neither inside nor around another tensor's name (an array cannot also be a group)."""
    names, groups = {}, {STRUCTURE}
    for path, t in _walk(obj, ()):
        parts = [str(p) for p in path]
        name = "/".join(parts)
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts))}
        taken = set(names.values())
        if (id(t) in names or not parts or not all(map(_valid_part, parts)) or name in taken or name in groups
                or prefixes & taken):
            continue
        names[id(t)] = name
        groups |= prefixes
    return names


def _regular(chunks):
    return all(len(set(c[:-1])) <= 1 and (len(c) < 2 or c[-1] <= c[0]) for c in chunks)


def _to_host(block):
    """A chunk on the host for Zarr's write: cupy's (and the strict test type's) explicit copy."""
    return block if isinstance(block, np.ndarray) else block.get()


def _write(t, path, name):
    arr = t.array
    if type(arr._meta) is not np.ndarray:
        arr = arr.map_blocks(_to_host, dtype=arr.dtype, meta=np.empty((0,) * arr.ndim, arr.dtype))
    if not _regular(arr.chunks):
        arr = arr.rechunk(tuple(max(c, default=1) for c in arr.chunks))
    attrs = {"chunks": [list(c) for c in t.chunks], "requires_grad": t.requires_grad,
             "parameter": isinstance(t, Parameter), "device": t.device}
    return da.to_zarr(arr, path, component=name, compute=False, attributes={"daskgrad": attrs}, **_array_options())


# ------------------------------------------------------------------------ load
def load(path, map_location=None, *, weights_only=None):
    """Read what :func:`save` wrote, or a torch checkpoint file, into daskgrad tensors in memory.

    ``map_location="cpu"`` (or ``"cuda"``) puts every tensor there; by default each goes back to the
    device it was saved from, as torch.load does.  ``weights_only`` (default True, as torch.load's):
    build only tensors, containers, numbers, strings and dtypes -- what state_dicts and training state
    hold -- and refuse anything else before it is built, with torch's words
    (:mod:`daskgrad.serialization`; ``weights_only=False`` builds any object the file names, so it can
    run code: only for a file you trust).  A chunk file changed or missing since the save raises a
    RuntimeError naming the tensor.  A torch file is read by ``torch.load`` with the same
    ``weights_only``.
    """
    path = os.fspath(path)
    weights_only = True if weights_only is None else bool(weights_only)
    if os.path.isdir(path):
        obj, tensors = _load_checkpoint(path, map_location, weights_only)
    elif os.path.isfile(path):
        obj, tensors = _load_torch(path, map_location, weights_only)
    else:
        raise FileNotFoundError(f"No such file or directory: '{path}'")
    runtime.persist([], store=[t._storage for t in tensors])
    return obj


class _Unpickler(WeightsUnpickler):
    """The structure's unpickler: tensors through persistent ids (names of the checkpoint's arrays);
    other globals allowlisted (:mod:`daskgrad.serialization`) unless ``weights_only=False``."""

    def __init__(self, file, read, names, weights_only):
        super().__init__(file)
        self.read, self.names, self.loaded, self.weights_only = read, names, {}, weights_only
        self.views = {}

    def find_class(self, module, name):
        if self.weights_only:
            return super().find_class(module, name)
        return pickle.Unpickler.find_class(self, module, name)

    def persistent_load(self, name):
        if type(name) is tuple and len(name) == 6 and name[0] == "view":  # (see _Pickler)
            if name not in self.views:
                self.views[name] = _view_of(self.persistent_load(name[2]), *name[3:])
            return self.views[name]
        if not isinstance(name, str) or name not in self.names:
            raise pickle.UnpicklingError(f"unsupported persistent id encountered: {name!r} is not a tensor of "
                                         "this checkpoint")
        if name not in self.loaded:
            self.loaded[name] = self.read(name)
        return self.loaded[name]


def _load_checkpoint(path, map_location, weights_only):
    zarr = _zarr()
    attrs = _attributes(path)
    if attrs is None:
        raise ValueError(f"{path} is a directory that is not a daskgrad checkpoint")
    if not isinstance(attrs, dict) or attrs.get("format") not in (1, _FORMAT):
        raise ValueError(f"{path} is a daskgrad checkpoint of format {attrs.get('format')!r}, which this daskgrad "
                         f"does not read (it reads formats 1 and {_FORMAT}): load it with a newer daskgrad")
    checked = attrs["format"] >= 2  # format 1 skipped chunks of zeros, and had no checksums
    group = zarr.open_group(path, mode="r")
    if STRUCTURE not in group:
        raise ValueError(f"{path} is an incomplete daskgrad checkpoint (no {STRUCTURE}: was its save cut short?)")
    names = {name for name, member in group.members(max_depth=None)
             if name != STRUCTURE and isinstance(member, zarr.Array) and "daskgrad" in member.attrs}
    structure = group[STRUCTURE]
    if checked:
        _check_chunks(path, [(STRUCTURE, structure, "its structure")] +
                      [(name, group[name], f"tensor {name!r}") for name in sorted(names)])
    data = _Chunks(structure, path, "its structure")[...]
    unpickler = _Unpickler(io.BytesIO(data.tobytes()), lambda name: _read(group[name], path, name, map_location),
                           names, weights_only)
    obj = unpickler.load()
    return obj, list(unpickler.loaded.values())


def _check_chunks(path, arrays):
    """Raise if a chunk file of any of ``arrays`` ((name, array, what)) is missing: Zarr would read
    the fill value in its place."""
    damaged = []
    for name, z, what in arrays:
        encode = z.metadata.chunk_key_encoding.encode_chunk_key
        root = os.path.join(path, name)
        present = {os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                   for d, _, files in os.walk(os.path.join(root, "c")) for f in files}
        if z.ndim == 0 and os.path.isfile(os.path.join(root, "c")):
            present.add("c")
        missing = [k for index in itertools.product(*map(range, z.cdata_shape)) if (k := encode(index)) not in present]
        if missing:
            shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
            damaged.append(f"{what} misses chunk file(s) {shown}")
    if damaged:
        raise RuntimeError(f"daskgrad.load: the checkpoint {path} is damaged: {'; '.join(damaged)}. It cannot be "
                           "read: load an earlier checkpoint.")


class _Chunks:
    """A Zarr array read by dask block by block (as ``da.from_zarr``), a chunk that fails its
    checksum raising an error that names the tensor and the file."""

    def __init__(self, z, path, what):
        self.z, self.path, self.what = z, path, what
        self.shape, self.dtype, self.ndim = z.shape, z.dtype, z.ndim

    def __getitem__(self, index):
        try:
            return self.z[index]
        except ValueError as e:
            if "checksum" not in str(e):
                raise
            raise RuntimeError(f"daskgrad.load: the checkpoint {self.path} is damaged: {self.what} has a chunk whose "
                               f"CRC32C checksum does not match its contents (the file changed after the save: {e}). "
                               "Load an earlier checkpoint.") from None


def _read(z, path, name, map_location):
    attrs = z.attrs["daskgrad"]
    # a fresh name: a checkpoint saved again at the same path holds other values under the same names
    arr = da.from_array(_Chunks(z, path, f"tensor {name!r}"), chunks=z.chunks, name=f"load-{uuid.uuid4().hex}",
                        asarray=True)
    chunks = tuple(tuple(c) for c in attrs["chunks"])
    if arr.chunks != chunks:
        arr = arr.rechunk(chunks)
    return _place(_make(arr, attrs["requires_grad"], attrs["parameter"]), map_location or attrs["device"])


def _make(arr, requires_grad, parameter):
    return (Parameter if parameter else Tensor)._make(arr, requires_grad=bool(requires_grad))


def _place(t, device):
    """``t`` on ``device``: the same tensor, or a leaf moved there (it keeps its class and flag)."""
    device = "cuda" if str(device).startswith("cuda") else str(device)
    if t.device == device:
        return t
    moved = t.detach().to(device)
    return type(t)._make(moved.array, requires_grad=t.requires_grad)


def _load_torch(path, map_location, weights_only):
    try:
        import torch
    except ImportError:
        raise ImportError(f"{path} is a file, not a daskgrad checkpoint directory; reading it as a torch "
                          "checkpoint needs torch (pip install torch)") from None
    obj = torch.load(path, map_location="cpu", weights_only=weights_only)  # torch's own (safe) loader
    converted = {}
    out = _from_torch(obj, torch, converted, map_location or "cpu")
    return out, list(converted.values())


def _from_torch(obj, torch, converted, device):
    """torch tensors -> daskgrad tensors in the same containers; a tensor met twice converts once."""
    if isinstance(obj, torch.Tensor):
        if id(obj) not in converted:
            value = obj.detach().numpy()
            arr = da.from_array(value, chunks=-1 if isinstance(obj, torch.nn.Parameter) else "auto")
            converted[id(obj)] = _place(_make(arr, obj.requires_grad, isinstance(obj, torch.nn.Parameter)), device)
        return converted[id(obj)]
    if isinstance(obj, dict):
        out = OrderedDict() if isinstance(obj, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _from_torch(v, torch, converted, device)
        return out
    if isinstance(obj, (list, tuple)):
        items = [_from_torch(v, torch, converted, device) for v in obj]
        return items if isinstance(obj, list) else type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj
