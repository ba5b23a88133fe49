"""Checkpoints a user can trust: ``daskgrad.load`` runs no code from the file (torch.load's
``weights_only=True`` default, with torch's words for what it refuses); ``daskgrad.save`` swaps a
complete checkpoint in at once, so a save that raises or a process SIGKILLed while saving leaves
the previous checkpoint loadable; and a chunk file deleted or changed since the save raises an
error naming the tensor instead of loading zeros or other numbers."""
import glob
import io
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter, OrderedDict

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import checkpoint, serialization

zarr = pytest.importorskip("zarr", reason='zarr is not installed: pip install "daskgrad[io]"')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def values(t):
    return t.detach().numpy()


def _with_structure(path, payload):
    """Replace the checkpoint's structure by the pickle bytes ``payload``, as a crafted file would
    (a valid array with a valid checksum: the attack is in what the bytes say)."""
    data = np.frombuffer(payload, dtype=np.uint8)
    group = zarr.open_group(str(path), mode="a")
    del group[checkpoint.STRUCTURE]
    group.create_array(checkpoint.STRUCTURE, shape=data.shape, dtype=np.uint8, chunks=(data.size,),
                       **checkpoint._array_options())[:] = data


class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _WritesAFile:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


class _Config:
    def __init__(self, lr):
        self.lr = lr


# ------------------------------------------------------------------ safe load
@pytest.mark.parametrize("attack", [_RunsACommand, _WritesAFile])
def test_a_crafted_checkpoint_runs_nothing_on_load_and_says_why_in_torch_s_words(tmp_path, attack):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    dg.save({"w": dg.ones(3)}, tmp_path / "ck")
    _with_structure(tmp_path / "ck", pickle.dumps({"w": 1, "evil": attack(str(marker))}))
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed") as ours:
        dg.load(tmp_path / "ck")
    assert not marker.exists()
    # torch.load refuses the same payload in the same words (its names for ours)
    torch.save({"w": torch.ones(3), "evil": attack(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(pickle.UnpicklingError) as theirs:
        torch.load(tmp_path / "evil.pt")
    assert not marker.exists()
    refusal = str(theirs.value).split("\n\nCheck the documentation")[0].rsplit("\n", 1)[-1]
    refusal = refusal.replace("torch.serialization", "daskgrad.serialization")
    assert refusal.strip() and refusal in str(ours.value)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        dg.load(tmp_path / "evil.pt")  # a torch file: torch.load's own refusal
    assert not marker.exists()


def test_a_class_of_the_user_s_is_refused_as_torch_refuses_it_and_loads_once_allowlisted(tmp_path):
    torch = pytest.importorskip("torch")
    dg.save({"w": dg.ones(2), "config": _Config(0.1)}, tmp_path / "ck")
    torch.save({"w": torch.ones(2), "config": _Config(0.1)}, tmp_path / "t.pt")
    with pytest.raises(pickle.UnpicklingError) as ours:
        dg.load(tmp_path / "ck")
    with pytest.raises(pickle.UnpicklingError) as theirs:
        torch.load(tmp_path / "t.pt")
    want = str(theirs.value).split("WeightsUnpickler error: ")[1].split("\n")[0]
    assert want.replace("torch.serialization", "daskgrad.serialization") in str(ours.value)
    assert "test_checkpoint_safety._Config was not an allowed global by default" in str(ours.value)
    with serialization.safe_globals([_Config]):
        assert dg.load(tmp_path / "ck")["config"].lr == 0.1
    assert serialization.get_safe_globals() == []
    assert dg.load(tmp_path / "ck", weights_only=False)["config"].lr == 0.1  # the escape hatch, as torch's
    serialization.add_safe_globals([_Config])
    try:
        assert dg.load(tmp_path / "ck")["config"].lr == 0.1
    finally:
        serialization.clear_safe_globals()


def test_what_training_state_holds_loads_by_default(tmp_path):
    from daskgrad import nn, optim

    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).double()
    opt = optim.Adam(model.parameters(), lr=0.1)
    sched = optim.lr_scheduler.MultiStepLR(opt, [2, 4])  # a Counter in its state
    (model(dg.randn(4, 3, dtype="float64")) ** 2).mean().backward()
    opt.step()
    sched.step()
    obj = {"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict(), "step": 3,
           "loss": 0.25, "note": "x", "raw": b"\x00\x01", "tags": {"a", "b"}, "z": 1 + 2j, "dtype": dg.float32,
           "shape": (2, 3), "nothing": None}
    dg.save(obj, tmp_path / "ck")
    got = dg.load(tmp_path / "ck")
    assert isinstance(got["model"], OrderedDict) and isinstance(got["sched"]["milestones"], Counter)
    assert {k: got[k] for k in ("step", "loss", "note", "raw", "tags", "z", "dtype", "shape", "nothing")} == \
        {k: obj[k] for k in ("step", "loss", "note", "raw", "tags", "z", "dtype", "shape", "nothing")}
    for name, t in model.state_dict().items():
        np.testing.assert_array_equal(values(got["model"][name]), values(t))


def test_a_persistent_id_that_names_no_tensor_of_the_checkpoint_is_refused(tmp_path):
    dg.save({"w": dg.ones(2)}, tmp_path / "ck")

    class Pointing(pickle.Pickler):
        def persistent_id(self, obj):
            return "../elsewhere" if obj == "here" else None

    buf = io.BytesIO()
    Pointing(buf).dump({"w": "here"})
    _with_structure(tmp_path / "ck", buf.getvalue())
    with pytest.raises(pickle.UnpicklingError, match="'../elsewhere' is not a tensor of this checkpoint"):
        dg.load(tmp_path / "ck")


def test_a_checkpoint_of_the_first_format_still_loads_and_an_unknown_format_is_named(tmp_path):
    # format 1, as daskgrad wrote it before: no checksums, a chunk of zeros not written at all
    path = str(tmp_path / "old")
    group = zarr.open_group(path, mode="w", attributes={"daskgrad": {"format": 1, "structure": "structure.pkl"}})
    z = group.create_array("w", shape=(4,), chunks=(2,), dtype="f8",
                           attributes={"daskgrad": {"chunks": [[2, 2]], "requires_grad": True, "parameter": False,
                                                    "device": "cpu"}})
    z[:] = [0.0, 0.0, 1.0, 2.0]
    assert sorted(os.listdir(os.path.join(path, "w", "c"))) == ["1"]

    class Named(pickle.Pickler):
        def persistent_id(self, obj):
            return "w" if obj == "the tensor" else None

    buf = io.BytesIO()
    Named(buf).dump({"w": "the tensor", "step": 7})
    data = np.frombuffer(buf.getvalue(), dtype=np.uint8)
    group.create_array("structure.pkl", shape=data.shape, dtype=np.uint8, chunks=(data.size,))[:] = data
    got = dg.load(path)
    assert got["step"] == 7 and got["w"].requires_grad
    np.testing.assert_array_equal(values(got["w"]), [0.0, 0.0, 1.0, 2.0])
    zarr.open_group(path, mode="a").attrs["daskgrad"] = {"format": 99, "structure": "structure.pkl"}
    with pytest.raises(ValueError, match="checkpoint of format 99, which this daskgrad does not read"):
        dg.load(path)


# ------------------------------------------------------------------ verified chunks
def _saved(tmp_path):
    w = dg.from_array(np.arange(12.0).reshape(4, 3), chunks=(2, 3))
    zeros = dg.zeros(6, chunks=3)  # all-zero chunks are written too: a missing file is never a value
    dg.save({"model": {"w": w}, "zeros": zeros}, tmp_path / "ck")
    return tmp_path / "ck"


def test_a_deleted_chunk_file_raises_naming_the_tensor_instead_of_loading_zeros(tmp_path):
    path = _saved(tmp_path)
    assert sorted(os.listdir(path / "zeros" / "c")) == ["0", "1"]
    os.remove(path / "model" / "w" / "c" / "1" / "0")
    with pytest.raises(RuntimeError, match=r"tensor 'model/w' misses chunk file\(s\) c/1/0"):
        dg.load(path)
    os.remove(path / "zeros" / "c" / "1")
    with pytest.raises(RuntimeError, match=r"tensor 'model/w' misses chunk file\(s\) c/1/0; "
                                           r"tensor 'zeros' misses chunk file\(s\) c/1\. It cannot be read"):
        dg.load(path)


def test_a_flipped_byte_in_a_chunk_file_raises_naming_the_tensor(tmp_path):
    path = _saved(tmp_path)
    chunk = path / "model" / "w" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x10
    chunk.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="tensor 'model/w' has a chunk whose CRC32C checksum does not match"):
        dg.load(path)


def test_a_changed_structure_raises_instead_of_unpickling_it(tmp_path):
    path = _saved(tmp_path)
    chunk = path / "structure.pkl" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[0] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="its structure has a chunk whose CRC32C checksum does not match"):
        dg.load(path)


# ------------------------------------------------------------------ atomic saves
def _fails_on_the_last_block(block, block_info=None):
    if block_info[0]["chunk-location"] == (block_info[0]["num-chunks"][0] - 1,):
        raise ZeroDivisionError("the last block's computation failed")
    return block * 2


def test_a_save_that_raises_leaves_the_previous_checkpoint_as_it_was(tmp_path):
    dg.save({"w": dg.ones(4, chunks=2), "step": 1}, tmp_path / "ck")
    bad = dg.map_blocks(_fails_on_the_last_block, dg.arange(8.0, chunks=2))
    with pytest.raises(ZeroDivisionError, match="last block"):
        dg.save({"w": bad, "step": 2}, tmp_path / "ck")
    got = dg.load(tmp_path / "ck")
    assert got["step"] == 1
    np.testing.assert_array_equal(values(got["w"]), np.ones(4))
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # nothing unfinished left beside it


def test_a_save_over_a_checkpoint_swaps_it_whole(tmp_path):
    dg.save({"old": dg.ones(3), "a": {"b": dg.ones(2)}}, tmp_path / "ck")
    dg.save({"new": dg.zeros(2)}, tmp_path / "ck")
    assert list(dg.load(tmp_path / "ck")) == ["new"]
    assert sorted(os.listdir(tmp_path / "ck")) == ["new", "structure.pkl", "zarr.json"]
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_save_through_a_link_replaces_the_checkpoint_it_points_to(tmp_path):
    dg.save({"v": 1}, tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "latest")
    dg.save({"v": 2}, tmp_path / "latest")
    assert os.path.islink(tmp_path / "latest") and dg.load(tmp_path / "real") == {"v": 2}
    assert sorted(os.listdir(tmp_path)) == ["latest", "real"]


_KILLED_WHILE_SAVING = """
import os, sys, time
import numpy as np
import daskgrad as dg
from distributed import Client

scheduler_file, path, marker = sys.argv[1:]
client = Client(scheduler_file=scheduler_file)
dg.save({"w": dg.from_array(np.ones(8), chunks=2), "step": 1}, path)

def slow_last_block(block, block_info=None):
    if block_info[0]["chunk-location"] == (3,):  # the others are computed and written first
        open(marker, "w").close()
        time.sleep(120)
    return block * 2

w = dg.map_blocks(slow_last_block, dg.from_array(np.arange(8.0), chunks=2))
dg.save({"w": w, "step": 2}, path)
print("the save finished")
"""


@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_client_killed_while_saving_leaves_the_previous_checkpoint_loadable(tmp_path):
    from test_cluster_processes import Processes

    procs = Processes([[], []])
    path, marker = tmp_path / "ck", tmp_path / "writing"
    try:
        script = subprocess.Popen([sys.executable, "-c", _KILLED_WHILE_SAVING, procs.file, str(path), str(marker)],
                                  env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while not marker.exists():
            assert script.poll() is None, script.communicate()[1][-3000:]
            assert time.time() < deadline, "the save never started"
            time.sleep(0.05)
        unfinished = glob.glob(str(tmp_path / ".ck.saving-*"))
        while not glob.glob(os.path.join(unfinished[0], "w", "c", "*")) and time.time() < deadline:
            time.sleep(0.05)  # (the first blocks are written while the last one sleeps)
        assert len(unfinished) == 1 and glob.glob(os.path.join(unfinished[0], "w", "c", "*"))
        script.send_signal(signal.SIGKILL)  # the client process, mid-save
        script.wait()
        got = dg.load(path)  # here, without a cluster: the files alone
        assert got["step"] == 1
        np.testing.assert_array_equal(values(got["w"]), np.ones(8))
        dg.save({"w": dg.zeros(2), "step": 3}, path)  # the next save clears what the killed one left
        assert sorted(os.listdir(tmp_path)) == ["ck", "writing"]
        assert dg.load(path)["step"] == 3
    finally:
        procs.close()
