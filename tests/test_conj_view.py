"""``Tensor.conj()`` of a complex tensor is torch 2.13's conjugate view: it shares the tensor's storage seen
conjugated (``is_conj()``), so a write through it writes the conjugate into the tensor and a write to the
tensor is seen through it; ``mH`` and ``adjoint()`` too; ``resolve_conj()`` and ``conj_physical()`` are new
tensors.  (It was a copy: ``z.conj()[0] = 5`` changed nothing.)  Against torch on several chunkings, with
gradients through the writes."""
from __future__ import annotations

import numpy as np
import pytest

import daskgrad as dg

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(11)
Z = RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6))
CHUNKINGS = [2, ((1, 3), (1, 5))]  # even; uneven

WRITES = {
    "element set through conj": lambda z: z.conj().__setitem__((0, 1), 5 + 5j),
    "mul_ through conj": lambda z: z.conj().mul_(2j),
    "conj of a slice, add_": lambda z: z[1:, ::2].conj().add_(1 + 1j),
    "slice of conj, copy_": lambda z: z.conj()[2].copy_(z[0].clone()),
    "conj of conj, zero_ of a row": lambda z: z.conj().conj()[3].zero_(),
    "mH written": lambda z: z.mH[0].fill_(2 - 1j),
    "real of conj": lambda z: z.conj().real.add_(1),
    "imag of conj": lambda z: z.conj().imag.mul_(3),
    "tensor written, conj read": lambda z: z.add_(1j),
}


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
@pytest.mark.parametrize("write", WRITES)
def test_writes_through_the_conjugate_view_reach_the_tensor_as_torchs(write, chunks):
    t, d = torch.from_numpy(Z.copy()), dg.from_array(Z.copy(), chunks=chunks)
    t_views, d_views = [t.conj(), t.conj()[1:], t.mH], [d.conj(), d.conj()[1:], d.mH]
    WRITES[write](t)
    WRITES[write](d)
    np.testing.assert_array_equal(d.numpy(), t.numpy())
    assert d._version == t._version
    for q, r in zip(d_views, t_views):
        np.testing.assert_array_equal(q.numpy(), r.resolve_conj().numpy())
        assert q.is_conj() == r.is_conj()


def test_conj_bits_bases_and_nodes_as_torchs():
    t, d = torch.from_numpy(Z.copy()), dg.from_array(Z.copy(), chunks=2)
    for f in (lambda z: z.conj(), lambda z: z.conj()[0], lambda z: z.conj().conj(), lambda z: z.mH,
              lambda z: z.adjoint(), lambda z: z.conj().resolve_conj(), lambda z: z.conj_physical(),
              lambda z: z.conj() * 1, lambda z: z.real.conj()):
        r, q = f(t), f(d)
        assert (q.is_conj(), q._is_view()) == (r.is_conj(), r._is_view())
        np.testing.assert_array_equal(q.numpy(), r.resolve_conj().numpy())
    assert d.real.conj() is not None and d.real.conj()._base is d  # a real tensor's conj() is itself
    tz, dz = torch.from_numpy(Z.copy()).requires_grad_() * 1, dg.from_array(Z.copy(), requires_grad=True) * 1
    assert type(dz.conj().grad_fn).__name__ == type(tz.conj().grad_fn).__name__ == "ConjBackward0"
    assert dz.conj()._base is dz


def test_a_conjugate_view_of_a_leaf_refuses_a_write_as_torchs():
    for lib in (torch, dg):
        z = lib.tensor(Z, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an "
                                               "in-place operation"):
            z.conj().mul_(2)


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
def test_gradients_through_writes_of_the_conjugate_view_are_torchs(chunks):
    w = RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6))
    results = []
    for lib in (torch, dg):
        a = lib.tensor(Z, requires_grad=True) if lib is torch else dg.from_array(Z, chunks=chunks,
                                                                                   requires_grad=True)
        b = lib.tensor(w, requires_grad=True) if lib is torch else dg.from_array(w, chunks=chunks,
                                                                                   requires_grad=True)
        z = a * 1
        c = z.conj()
        c[1:3].mul_(b[1:3])      # written through the view: z's rows get conj(conj(z) * b)
        loss = (z * z.conj().exp()).abs().sum() + (c * 2j).real.sum()
        loss.backward()
        results.append((loss.detach().numpy(),
                        a.grad.numpy(), b.grad.numpy()))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-13)
