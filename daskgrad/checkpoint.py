"""Checkpoints that hold values: ``daskgrad.save`` and ``daskgrad.load``, torch.save/torch.load for
chunked tensors.

>>> dg.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step}, "ckpt")
>>> ck = dg.load("ckpt"); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])
IncompatibleKeys(missing_keys=[], unexpected_keys=[])

Layout: ``save`` always writes a directory (whatever its name ends with, ``.pt`` included) that is a
Zarr (format 3) group:

* one Zarr array per tensor, written chunk by chunk by the workers that hold the chunks, in
  parallel (nothing is gathered on the client).  A tensor reached through dicts, lists and tuples
  is named by its path there (``ckpt/model/0.weight``, ``ckpt/optim/state/0/exp_avg``); a key that
  cannot be a Zarr name (it holds ``/``, starts with ``__``, or the name is taken) gives
  ``tensor-N``.  Zarr wants regular chunks, so a tensor with uneven chunks is written with the
  largest chunk of each dimension; its own chunks are kept in the array's attributes
  (``attrs["daskgrad"] = {"chunks", "requires_grad", "parameter", "device"}``) and restored on load.
  Chunks on a GPU (cupy) are copied to the host, one chunk at a time on its worker, to be written;
* ``structure.pkl``, a 1-d uint8 Zarr array (so the directory stays a clean Zarr hierarchy): the
  bytes of a pickle of everything else (dicts, lists, numbers, strings, the step count, even a whole
  Module) in which each tensor is a pickle *persistent id*, its array's name -- the mechanism
  torch.save uses for its storages.  It is written last: a save cut short does not load.

Without daskgrad, ``zarr.open_group("ckpt")["model/0.weight"][:]`` reads a tensor's values, and
``pickle.Unpickler(io.BytesIO(zarr.open_array("ckpt", path="structure.pkl")[:].tobytes()))`` with
``persistent_load = lambda name: zarr.open_array("ckpt", path=name)`` reads the whole object.  As with
torch.load, loading unpickles: load trusted files only.

``load`` reads a checkpoint directory back, or a torch file (``torch.save(model.state_dict(), "m.pt")``,
through ``torch.load`` when torch is installed) into daskgrad tensors.  It reads every value into
memory -- the cluster's when a distributed Client is current (the chunks land on the workers, through
:func:`daskgrad.runtime.persist`, the one path for values the library keeps there), this process's
otherwise -- so the tensors do not depend on the files afterwards, as after torch.load.  The path
must be one the workers can read and write (a shared file system on a multi-node cluster).
"""
from __future__ import annotations

import io
import os
import pickle
from collections import OrderedDict

import dask
import dask.array as da
import numpy as np

from . import runtime
from ._tensor import Tensor
from .nn.module import Parameter

STRUCTURE = "structure.pkl"
_FORMAT = 1


def _zarr():
    try:
        import zarr
    except ImportError:
        raise ImportError('daskgrad.save and daskgrad.load of checkpoints need zarr: pip install "daskgrad[io]"') \
            from None
    return zarr


# ------------------------------------------------------------------------ save
def save(obj, path) -> None:
    """Write ``obj`` (tensors in dicts/lists/tuples, state_dicts, any picklable object holding tensors)
    to the directory ``path`` (see the module docstring for the layout); an earlier checkpoint there is
    replaced.  Pending updates (an optimizer step not yet run) are computed first, once."""
    zarr = _zarr()
    path = os.fspath(path)
    _check_target(path)
    tensors = {}  # array name -> tensor
    structure = _dumps(obj, _readable_names(obj), tensors)
    runtime.persist([])  # the step's lazy parameter updates: computed (and kept) once, not per write
    group = zarr.open_group(path, mode="w", attributes={"daskgrad": {"format": _FORMAT, "structure": STRUCTURE}})
    writes = [_write(t, path, name) for name, t in tensors.items()]
    client = runtime.current_client()
    if client is not None:
        client.compute(writes, sync=True)
    elif writes:
        dask.compute(*writes)
    data = np.frombuffer(structure, dtype=np.uint8)
    group.create_array(STRUCTURE, shape=data.shape, dtype=np.uint8, chunks=(max(data.size, 1),))[:] = data


def _check_target(path):
    """Replace a checkpoint, never a directory that is something else (save clears the directory)."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise FileExistsError(f"{path} exists and is not a directory: daskgrad.save writes a directory")
    if os.listdir(path) and not _is_checkpoint(path):
        raise FileExistsError(f"{path} is a directory that is not a daskgrad checkpoint: not overwriting it")


def _is_checkpoint(path):
    import json

    try:
        with open(os.path.join(path, "zarr.json")) as f:
            return "daskgrad" in json.load(f).get("attributes", {})
    except (OSError, ValueError):
        return False


class _Pickler(pickle.Pickler):
    """Pickles the structure; each tensor becomes a persistent id, the name of its Zarr array."""

    def __init__(self, file, names, tensors):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.names, self.tensors, self.by_id = names, tensors, {}

    def persistent_id(self, obj):
        if not isinstance(obj, Tensor):
            return None
        name = self.by_id.get(id(obj))
        if name is None:  # a tensor saved twice is written once and loads as one tensor
            name = self.names.get(id(obj)) or _free_name(self.names.values(), self.tensors)
            self.by_id[id(obj)] = name
            self.tensors[name] = obj
        return name


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
    return da.to_zarr(arr, path, component=name, compute=False, attributes={"daskgrad": attrs})


# ------------------------------------------------------------------------ load
def load(path, map_location=None):
    """Read what :func:`save` wrote, or a torch checkpoint file, into daskgrad tensors in memory.

    ``map_location="cpu"`` (or ``"cuda"``) puts every tensor there; by default each goes back to the
    device it was saved from, as torch.load does.  A torch file is read with torch's safe loader
    (``weights_only=True``): tensors, containers, numbers, strings -- what state_dicts hold.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        obj, tensors = _load_checkpoint(path, map_location)
    elif os.path.isfile(path):
        obj, tensors = _load_torch(path, map_location)
    else:
        raise FileNotFoundError(f"No such file or directory: '{path}'")
    runtime.persist([], store=[t._storage for t in tensors])
    return obj


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, read):
        super().__init__(file)
        self.read, self.loaded = read, {}

    def persistent_load(self, name):
        if name not in self.loaded:
            self.loaded[name] = self.read(name)
        return self.loaded[name]


def _load_checkpoint(path, map_location):
    zarr = _zarr()
    if not _is_checkpoint(path):
        raise ValueError(f"{path} is a directory that is not a daskgrad checkpoint")
    group = zarr.open_group(path, mode="r")
    if STRUCTURE not in group:
        raise ValueError(f"{path} is an incomplete daskgrad checkpoint (no {STRUCTURE}: was its save cut short?)")
    data = group[STRUCTURE][:]
    unpickler = _Unpickler(io.BytesIO(data.tobytes()), lambda name: _read(group[name], map_location))
    obj = unpickler.load()
    return obj, list(unpickler.loaded.values())


def _read(z, map_location):
    attrs = z.attrs["daskgrad"]
    arr = da.from_zarr(z)
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


def _load_torch(path, map_location):
    try:
        import torch
    except ImportError:
        raise ImportError(f"{path} is a file, not a daskgrad checkpoint directory; reading it as a torch "
                          "checkpoint needs torch (pip install torch)") from None
    obj = torch.load(path, map_location="cpu", weights_only=True)  # torch's own safe loader
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
