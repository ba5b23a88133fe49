"""Conv1d/2d/3d's ``padding_mode`` 'reflect', 'replicate' and 'circular' as torch's: the input padded by
``F.pad`` in that mode (``_reversed_padding_repeated_twice``; 'same' puts the odd cell at the end), then
convolved unpadded.  Values, input and weight gradients against torch, over one chunk and several."""
import numpy as np
import pytest
import torch

import daskgrad as dg

CASES = [(1, 3, 1, 1), (2, 3, 2, 1), ("same", 4, 1, 1), ("same", 3, 2, 1), ("valid", 3, 1, 1), (1, 2, 1, 2)]


@pytest.mark.parametrize("nsp", [1, 2, 3])
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes_are_torchs(nsp, mode):
    rng = np.random.default_rng(nsp)
    for padding, k, dilation, stride in CASES if nsp < 3 else CASES[:3]:
        x = rng.standard_normal((2, 3) + (7,) * nsp)
        kw = dict(stride=stride, padding=padding, dilation=dilation, padding_mode=mode)
        ref = getattr(torch.nn, f"Conv{nsp}d")(3, 4, k, dtype=torch.float64, **kw)
        mod = getattr(dg.nn, f"Conv{nsp}d")(3, 4, k, dtype="float64", **kw)
        mod.load_state_dict({name: v.detach().numpy() for name, v in ref.state_dict().items()})
        assert repr(mod) == repr(ref)
        xt = torch.tensor(x, requires_grad=True)
        yt = ref(xt)
        (yt ** 2).sum().backward()
        for chunks in ((2, 3) + (7,) * nsp, (1, 3) + (3,) * nsp):
            xd = dg.tensor(x, chunks=chunks, requires_grad=True)
            mod.zero_grad()
            yd = mod(xd)
            (yd ** 2).sum().backward()
            np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-11)
            np.testing.assert_allclose(mod.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-12, atol=1e-11)


def test_an_unknown_mode_and_transposed_convolutions_refuse_as_torch():
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        dg.nn.Conv2d(1, 1, 3, padding_mode="wrap")
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported for ConvTranspose2d'):
        dg.nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
