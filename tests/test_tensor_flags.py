"""torch's device and layout attributes of a tensor (``is_cpu``, ``get_device()``, ``layout``, the ``is_sparse``
family), checked against torch on the same values: code written for torch that asks them before choosing a
path (``if t.is_sparse: ...``, ``t.get_device()``) takes the same path."""
import pickle

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

FLAGS = ("is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_nested", "is_mkldnn", "is_xpu", "is_mps",
         "is_ipu", "is_xla", "is_vulkan", "is_maia", "is_mtia", "is_cpu", "is_cuda")


@pytest.mark.parametrize("chunks", [6, 3, (4, 2), 1])
def test_a_host_tensor_s_flags_device_index_and_layout_are_torch_s(chunks):
    values = np.arange(6.0)
    t, ref = dg.from_array(values, chunks=chunks), torch.from_numpy(values)
    for x, r in ((t, ref), (t[1:4], ref[1:4]), (t.reshape(2, 3).T, ref.reshape(2, 3).T), (t.sum(), ref.sum())):
        for flag in FLAGS:
            assert getattr(x, flag) == getattr(r, flag), flag
        assert x.get_device() == r.get_device() == -1
        assert repr(x.layout) == repr(r.layout).replace("torch", "daskgrad") == "daskgrad.strided"
        assert x.layout is dg.strided


def test_flags_are_read_only_attributes_as_torch_s():
    t, ref = dg.zeros(3), torch.zeros(3)
    for flag in ("is_sparse", "is_cpu", "layout"):
        with pytest.raises(AttributeError):
            setattr(ref, flag, True)
        with pytest.raises(AttributeError):
            setattr(t, flag, True)
    assert callable(t.get_device) and not callable(t.is_cpu)


def test_the_strided_layout_pickles_as_itself():
    assert pickle.loads(pickle.dumps(dg.strided)) is dg.strided
    assert isinstance(dg.strided, dg.layout)
