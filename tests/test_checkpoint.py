"""Checkpoints that hold values: daskgrad.save / daskgrad.load (a Zarr group written by the workers),
pickling a Tensor (its values, as torch), torch files, and the user guide's checkpoint-and-resume recipe
run as written in two processes."""
import copy
import io
import os
import pickle
import re
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import _dask, nn, optim, runtime

zarr = pytest.importorskip("zarr", reason='zarr is not installed: pip install "daskgrad[io]"')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def values(t):
    return t.detach().numpy()


def assert_same_tensor(got, want):
    assert isinstance(got, dg.Tensor) and type(got) is type(want)
    assert got.dtype == want.dtype and got.shape == want.shape and got.chunks == want.chunks
    assert got.requires_grad == want.requires_grad
    np.testing.assert_array_equal(values(got), values(want))


def trained(steps=2, seed=0):
    dg.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    opt = optim.Adam(model.parameters(), lr=0.05)
    X = dg.randn(12, 3, chunks=(4, 3), dtype="float64")
    for _ in range(steps):
        step(model, opt, X)
    return model, opt, X


def step(model, opt, X):
    opt.zero_grad()
    (model(X) ** 2).mean().backward()
    opt.step()


# ------------------------------------------------------------------ round trips
def test_nested_containers_round_trip_values_dtypes_chunks_and_identity(tmp_path):
    uneven = dg.from_array(np.arange(30.0).reshape(10, 3), chunks=((2, 4, 4), (2, 1)))
    f32 = dg.from_array(np.linspace(0, 1, 7, dtype=np.float32), chunks=((3, 1, 3),))
    ints = dg.arange(9, chunks=4)
    flags = dg.from_array(np.array([True, False, True]), chunks=2)
    scalar = dg.tensor(2.5)
    obj = {"a": [uneven, (f32, ints), "text", 7], "b": OrderedDict(x=flags, y=scalar), "again": uneven,
           "odd/key": f32 * 1, 3: {"n": None}}
    dg.save(obj, tmp_path / "ck")
    got = dg.load(tmp_path / "ck")
    assert list(got) == list(obj) and isinstance(got["b"], OrderedDict) and isinstance(got["a"][1], tuple)
    assert got["a"][2:] == ["text", 7] and got[3] == {"n": None}
    for path in [("a", 0), ("a", 1, 0), ("a", 1, 1), ("b", "x"), ("b", "y"), ("odd/key",)]:
        g, w = got, obj
        for k in path:
            g, w = g[k], w[k]
        assert_same_tensor(g, w)
    assert got["again"] is got["a"][0]  # one tensor saved twice is one tensor, as torch keeps sharing
    assert [str(got[k].dtype) for k in ("odd/key",)] == ["float32"] and got["a"][1][1].dtype == np.int64


def test_flags_and_parameters_come_back_as_torch_save_gives_them(tmp_path):
    leaf = dg.randn(4, requires_grad=True)
    nonleaf = leaf * 2  # torch.save of a non-leaf: a leaf that requires grad
    param = nn.Parameter(dg.ones(3))
    frozen = nn.Parameter(dg.ones(3), requires_grad=False)
    dg.save([leaf, nonleaf, param, frozen], tmp_path / "ck")
    got = dg.load(tmp_path / "ck")
    assert [t.requires_grad for t in got] == [True, True, True, False]
    assert all(t.is_leaf for t in got)
    assert [type(t) for t in got] == [dg.Tensor, dg.Tensor, nn.Parameter, nn.Parameter]
    np.testing.assert_array_equal(values(got[1]), values(nonleaf))


def test_module_and_adam_state_dicts_resume_the_same_trajectory(tmp_path):
    model, opt, X = trained()
    dg.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 2}, tmp_path / "ck")
    ck = dg.load(tmp_path / "ck")
    assert ck["step"] == 2 and ck["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
    model2, opt2, _ = trained(steps=0, seed=1)  # other initial values: all must come from the file
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["optim"])
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(values(p), values(q))
    step(model, opt, X)
    step(model2, opt2, X)
    for p, q in zip(model.parameters(), model2.parameters()):
        np.testing.assert_array_equal(values(p), values(q))


def test_a_whole_module_saves_as_torch_save_of_a_model_does(tmp_path):
    model, _, X = trained()
    odd = {"tensor-0": {"a": dg.ones(2)}, "x/y": dg.zeros(3)}  # names that cannot be Zarr paths as they are
    dg.save({"model": model, **odd}, tmp_path / "ck")
    # as torch.load of a whole model: refused by default (a class is code), read with weights_only=False
    with pytest.raises(pickle.UnpicklingError, match=r"GLOBAL daskgrad\.nn\.layers\.Sequential was not an allowed"):
        dg.load(tmp_path / "ck")
    got = dg.load(tmp_path / "ck", weights_only=False)
    assert type(got["model"]) is nn.Sequential and type(got["model"][0].weight) is nn.Parameter
    np.testing.assert_array_equal(values(got["model"](X)), values(model(X)))
    np.testing.assert_array_equal(values(got["x/y"]), np.zeros(3))
    np.testing.assert_array_equal(values(got["tensor-0"]["a"]), np.ones(2))


def test_a_step_not_yet_run_is_saved_as_its_result(tmp_path):
    model, opt, X = trained(steps=1)
    step(model, opt, X)  # the second update is lazy until something submits
    dg.save(model.state_dict(), tmp_path / "ck")
    for (name, p), (_, q) in zip(model.state_dict().items(), dg.load(tmp_path / "ck").items()):
        np.testing.assert_array_equal(values(p), values(q), err_msg=name)


# ------------------------------------------------------------------ the layout
def test_directory_is_a_zarr_group_that_zarr_alone_reads(tmp_path):
    model, opt, _ = trained()
    uneven = dg.from_array(np.arange(24.0).reshape(6, 4), chunks=((1, 2, 3), (3, 1)))
    obj = {"model": model.state_dict(), "optim": opt.state_dict(), "x": uneven}
    dg.save(obj, tmp_path / "ck")
    group = zarr.open_group(str(tmp_path / "ck"), mode="r")
    np.testing.assert_array_equal(group["model/0.weight"][:], values(model.state_dict()["0.weight"]))
    np.testing.assert_array_equal(group["optim/state/0/exp_avg"][:], values(obj["optim"]["state"][0]["exp_avg"]))
    x = group["x"]
    assert x.chunks == (3, 3)  # regular chunks for Zarr; the tensor's own in the attributes
    assert x.attrs["daskgrad"]["chunks"] == [[1, 2, 3], [3, 1]]
    np.testing.assert_array_equal(x[:], np.arange(24.0).reshape(6, 4))
    assert dg.load(tmp_path / "ck")["x"].chunks == ((1, 2, 3), (3, 1))

    # the module docstring's recipe for the whole object, without daskgrad
    class Unpickler(pickle.Unpickler):
        def persistent_load(self, name):
            return zarr.open_array(str(tmp_path / "ck"), path=name, mode="r")

    raw = zarr.open_array(str(tmp_path / "ck"), path="structure.pkl", mode="r")[:].tobytes()
    plain = Unpickler(io.BytesIO(raw)).load()
    assert plain["optim"]["param_groups"] == obj["optim"]["param_groups"]
    np.testing.assert_array_equal(plain["model"]["2.bias"][:], values(model.state_dict()["2.bias"]))


def test_save_replaces_a_checkpoint_but_never_another_directory(tmp_path):
    dg.save({"old": dg.ones(3)}, tmp_path / "ck")
    dg.save({"new": dg.zeros(2)}, tmp_path / "ck")
    assert list(dg.load(tmp_path / "ck")) == ["new"]
    assert "old" not in zarr.open_group(str(tmp_path / "ck"), mode="r")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a daskgrad checkpoint"):
        dg.save({"x": dg.ones(2)}, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="not a daskgrad checkpoint"):
        dg.load(tmp_path / "mine")
    with pytest.raises(FileNotFoundError):
        dg.load(tmp_path / "nothing")


def test_without_zarr_save_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zarr", None)  # `import zarr` raises ImportError
    with pytest.raises(ImportError, match=re.escape('pip install "daskgrad[io]"')):
        dg.save({"x": dg.ones(2)}, tmp_path / "ck")


def test_strict_chunks_are_copied_to_the_host_explicitly_for_the_write(tmp_path):
    from strict_array import StrictArray, to_strict

    x = dg.from_array(np.arange(12.0).reshape(3, 4), chunks=(2, 3))
    dg.save({"x": to_strict(x)}, tmp_path / "ck")  # StrictArray refuses np.asarray, as cupy does
    np.testing.assert_array_equal(values(dg.load(tmp_path / "ck")["x"]), values(x))
    back = pickle.loads(pickle.dumps(to_strict(x)))  # a pickle keeps the chunk type (cupy stays cupy)
    assert isinstance(back.array._meta, StrictArray) and back.chunks == x.chunks


_LOAD_PICKLE = """
import pickle, sys
import numpy as np
from daskgrad import nn, runtime
assert runtime.current_client() is None
obj = pickle.load(open(sys.argv[1], "rb"))
t, p, sd = obj["t"], obj["p"], obj["sd"]
assert type(p) is nn.Parameter and p.requires_grad and t.chunks == ((3, 3, 4),) and not t.requires_grad
out = {"t": t.numpy(), "p": p.detach().numpy(), **{k: v.numpy() for k, v in sd.items()}}
np.savez(sys.argv[2], **out)
"""


# ------------------------------------------------------------------ pickling and copying
def test_pickle_round_trip_matches_torch():
    x = dg.from_array(np.arange(6.0).reshape(2, 3), chunks=(1, 2), requires_grad=True)
    (x * x).sum().backward()
    for t in (x, x * 2, nn.Parameter(dg.ones(2), requires_grad=False)):
        back = pickle.loads(pickle.dumps(t))
        assert type(back) is type(t) and back.chunks == t.chunks and back.dtype == t.dtype
        assert back.requires_grad == t.requires_grad and back.is_leaf and back.grad is None
        np.testing.assert_array_equal(values(back), values(t))


def test_deepcopy_shares_the_lazy_array_and_refuses_non_leaves_as_torch():
    x = dg.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    c = copy.deepcopy(x)
    assert c is not x and c.array is x.array and c.requires_grad and c.grad is not x.grad
    np.testing.assert_array_equal(values(c.grad), [2.0, 2.0, 2.0])
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
        copy.deepcopy(x * 2)
    model = copy.deepcopy(nn.Linear(2, 2))
    assert all(type(p) is nn.Parameter for p in model.parameters())


def _cupy_or_skip():
    cupy = pytest.importorskip("cupy")
    try:
        cupy.zeros(1)
    except Exception as exc:  # no device, no driver: importing cupy is not enough
        pytest.skip(f"cupy cannot allocate on a GPU here: {exc}")
    return cupy


@pytest.mark.gpu
def test_cupy_chunks_pickle_as_cupy_and_checkpoints_come_back_on_the_gpu(tmp_path):
    cupy = _cupy_or_skip()
    x = dg.from_array(np.arange(10.0), chunks=((3, 3, 4),)).cuda()
    back = pickle.loads(pickle.dumps(x))
    assert back.device == "cuda" and isinstance(back.array.blocks[0].compute(), cupy.ndarray)
    dg.save({"x": x}, tmp_path / "ck")
    on_gpu, on_host = dg.load(tmp_path / "ck")["x"], dg.load(tmp_path / "ck", map_location="cpu")["x"]
    assert on_gpu.device == "cuda" and on_host.device == "cpu" and on_gpu.chunks == x.chunks
    np.testing.assert_array_equal(on_host.numpy(), np.arange(10.0))


# ------------------------------------------------------------------ torch files
def test_torch_state_dict_file_loads_into_an_equivalent_daskgrad_model(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.1)
    xt = torch.randn(5, 3, dtype=torch.float64)
    tmodel(xt).pow(2).mean().backward()
    topt.step()
    torch.save(tmodel.state_dict(), tmp_path / "m.pt")
    torch.save({"model": tmodel.state_dict(), "optim": topt.state_dict()}, tmp_path / "both.pt")

    sd = dg.load(tmp_path / "m.pt")
    assert isinstance(sd, OrderedDict) and all(isinstance(v, dg.Tensor) for v in sd.values())
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    model.load_state_dict(dg.load(tmp_path / "m.pt"))
    x = dg.from_array(xt.numpy())
    np.testing.assert_allclose(values(model(x)), tmodel(xt).detach().numpy(), rtol=1e-12)

    # and training goes on from torch's optimizer state
    both = dg.load(tmp_path / "both.pt")
    opt = optim.Adam(model.parameters(), lr=0.1)
    opt.load_state_dict(both["optim"])
    topt.zero_grad()
    tmodel(xt).pow(2).mean().backward()
    topt.step()
    opt.zero_grad()
    (model(x) ** 2).mean().backward()
    opt.step()
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        np.testing.assert_allclose(values(p), tp.detach().numpy(), rtol=1e-10)


def test_a_torch_file_without_torch_says_so(tmp_path, monkeypatch):
    (tmp_path / "m.pt").write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="needs torch"):
        dg.load(tmp_path / "m.pt")


# ------------------------------------------------------------------ the user guide's recipe
def _readme_blocks():
    text = open(os.path.join(ROOT, "docs", "user-guide", "checkpointing.md")).read()
    section = text.split("## Checkpoint and resume\n", 1)[1].split("\n## ", 1)[0]
    setup, train_and_save, resume = re.findall(r"```python\n(.*?)```", section, re.S)
    return setup, train_and_save, resume


_DUMP = """
import numpy as _np
_np.savez({file!r}, **{{n: p.detach().numpy() for n, p in model.state_dict().items()}},
          **{{f"{{i}}.{{k}}": _np.asarray(v.numpy() if hasattr(v, "numpy") else v)
             for i, s in opt.state_dict()["state"].items() for k, v in s.items()}})
"""
# before the resume block's first step: what the model and optimizer hold right after loading
_DUMP_AT_FIRST_STEP = """
_recipe_step, _dumped = train_step, []
def train_step():
    if not _dumped:
        _dumped.append(True)
""" + "\n".join("        " + line for line in _DUMP.format(file="loaded.npz").strip().splitlines()) + """
    _recipe_step()
"""


def _run(code, cwd):
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.cluster
@pytest.mark.slow
def test_readme_checkpoint_recipe_resumes_where_it_stopped(tmp_path):
    setup, train_and_save, resume = _readme_blocks()
    # one process: the recipe's training and save, then on without a restart to the resume's last step
    go_on = "for step in range(step + 1, 6):\n    train_step()\n"
    _run(setup + train_and_save + _DUMP.format(file="saved.npz") + go_on + _DUMP.format(file="straight.npz"),
         tmp_path)
    # a new process: the setup, then the recipe's resume as written
    _run(setup + _DUMP_AT_FIRST_STEP + resume + _DUMP.format(file="resumed.npz"), tmp_path)
    saved, loaded = np.load(tmp_path / "saved.npz"), np.load(tmp_path / "loaded.npz")
    straight, resumed = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(saved) == sorted(loaded) == sorted(straight) == sorted(resumed)
    for name in saved:
        np.testing.assert_array_equal(loaded[name], saved[name], err_msg=name)
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
        if not name.endswith(".step"):
            assert saved[name].dtype == np.float64, name
            assert not np.array_equal(resumed[name], saved[name]), name  # it did train on
    assert int(resumed["0.step"]) == 6


# The cluster tests last: the module's client fixture stays up once started, and daskgrad submits to any
# live Client, so a test after them would run on the cluster.
# ------------------------------------------------------------------ on a cluster
def test_save_on_a_cluster_is_written_by_the_workers_and_load_puts_chunks_on_them(client, tmp_path,
                                                                                  monkeypatch):
    from dask.core import flatten
    from dask.utils import key_split
    from distributed import get_task_stream

    dg.manual_seed(3)
    y = dg.randn(400, 50, chunks=(100, 50), dtype="float64") * 2 + 1  # lazy: made on the workers

    def no_gather(*args, **kwargs):
        raise AssertionError("save gathered a tensor on the client")

    with monkeypatch.context() as m:
        m.setattr(runtime, "_gather", no_gather)
        m.setattr(dg.Tensor, "compute", no_gather)
        with get_task_stream(client) as stream:
            dg.save({"y": y, "note": "lazy"}, tmp_path / "ck")
    workers = set(client.scheduler_info()["workers"])
    writes = [t for t in stream.data if "store-map" in key_split(t["key"])]
    assert len({t["key"] for t in writes}) >= y.array.npartitions
    assert {t["worker"] for t in writes} == workers  # both workers wrote their chunks

    ck = dg.load(tmp_path / "ck")
    assert _dask.materialized(ck["y"].array)  # its chunks are read into the workers' memory
    where = client.who_has()
    assert all(where.get(k) for k in flatten(ck["y"].array.__dask_keys__()))
    np.testing.assert_array_equal(values(ck["y"]), values(y))


def test_a_pickle_made_on_a_cluster_holds_values_and_loads_without_it(client, tmp_path):
    model, opt, X = trained()  # parameters now live on the workers
    t = dg.from_array(np.arange(10.0), chunks=((3, 3, 4),)) * 3
    p = nn.Parameter(dg.from_array(np.array([1.0, 2.0])))
    with open(tmp_path / "obj.pkl", "wb") as f:
        pickle.dump({"t": t, "p": p, "sd": model.state_dict()}, f)
    out = subprocess.run([sys.executable, "-c", _LOAD_PICKLE, str(tmp_path / "obj.pkl"), str(tmp_path / "v.npz")],
                         env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = np.load(tmp_path / "v.npz")
    np.testing.assert_array_equal(got["t"], np.arange(10.0) * 3)
    np.testing.assert_array_equal(got["p"], [1.0, 2.0])
    for name, v in model.state_dict().items():
        np.testing.assert_array_equal(got[name], values(v))
