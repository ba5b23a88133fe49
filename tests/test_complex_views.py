"""``real``, ``imag``, ``view_as_real`` and ``view_as_complex`` as torch 2.13's views: a write through any
of them reaches the complex (or real) tensor it views and every other view of it, with torch's strides,
nodes, gradients and errors, on even, uneven and one-element chunks, cached or not.  (They were copies:
``z.imag.zero_()`` changed nothing.)"""
from __future__ import annotations

import dask
import numpy as np
import pytest

import daskgrad as dg
from strict_array import StrictArray, to_strict

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
Z = RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6))
CHUNKINGS = [-1, 2, ((1, 3), (1, 5)), 1]

# each writes through views of a complex tensor ``z`` of shape (4, 6); ``lib`` is torch or daskgrad
WRITES = {
    "imag zero_": lambda z, lib: z.imag.zero_(),
    "real row set": lambda z, lib: z.real.__setitem__(0, 5.0),
    "real attribute set": lambda z, lib: setattr(z, "real", 1.5),
    "imag attribute set from a view": lambda z, lib: setattr(z, "imag", z.real[0]),
    "imag of a slice, strided": lambda z, lib: z[1:].imag[:, ::2].mul_(-2),
    "real of the transpose": lambda z, lib: z.T.real.add_(1),
    "conjugate in place through pairs": lambda z, lib: lib.view_as_real(z)[..., 1].neg_(),
    "pairs swapped": lambda z, lib: lib.view_as_real(z).copy_(lib.view_as_real(z).flip(-1).clone()),
    "complex of pairs": lambda z, lib: lib.view_as_complex(lib.view_as_real(z)[1:3]).mul_(1j),
    "real of a view written, then read through imag": lambda z, lib: z.imag.copy_(z[2].real.clone()),
}


def _pair(chunks, dtype="complex128"):
    values = Z.astype(dtype)
    return torch.from_numpy(values.copy()), dg.from_array(values.copy(), chunks=chunks)


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
@pytest.mark.parametrize("write", WRITES)
def test_writes_through_real_imag_and_pairs_reach_the_complex_tensor_as_torchs(write, dtype, chunks):
    t, d = _pair(chunks, dtype)
    t_views = [t.real, t.imag[1:], torch.view_as_real(t)]  # views made before the write see it too
    d_views = [d.real, d.imag[1:], dg.view_as_real(d)]
    WRITES[write](t, torch)
    WRITES[write](d, dg)
    np.testing.assert_array_equal(d.numpy(), t.numpy())
    assert d._version == t._version
    for q, r in zip(d_views, t_views):
        np.testing.assert_array_equal(q.numpy(), r.numpy())
        assert q.dtype == dg.__dict__[str(r.dtype).split(".")[1]]


@pytest.mark.parametrize("view", ["real", "imag", "view_as_real", "view_as_complex", "real of a slice",
                                  "imag of the transpose", "real of a real tensor"])
def test_the_views_have_torchs_layout_base_and_nodes(view):
    make = {"real": lambda z, lib: z.real, "imag": lambda z, lib: z.imag,
            "view_as_real": lambda z, lib: lib.view_as_real(z),
            "view_as_complex": lambda z, lib: lib.view_as_complex(lib.view_as_real(z)[::2]),
            "real of a slice": lambda z, lib: z[1:, 2:].real, "imag of the transpose": lambda z, lib: z.T.imag,
            "real of a real tensor": lambda z, lib: (z.real * 1).real}[view]
    tz = torch.from_numpy(Z.copy()).requires_grad_()
    dz = dg.from_array(Z.copy(), chunks=2, requires_grad=True)
    r, q = make(tz * 1, torch), make(dz * 1, dg)
    assert (q.shape, q.stride(), q.storage_offset(), q.is_contiguous()) == \
        (tuple(r.shape), r.stride(), r.storage_offset(), r.is_contiguous())
    assert q._is_view() == r._is_view()
    names = []
    for node in (q.grad_fn, r.grad_fn):
        chain = []
        while node is not None and type(node).__name__ != "MulBackward0":
            chain.append(type(node).__name__)
            node = node.next_functions[0][0]
        names.append(chain)
    assert names[0][:2] == names[1][:2]  # (the parts' nodes; torch records a slice per dim, daskgrad one)
    np.testing.assert_array_equal(q.detach().numpy(), r.detach().numpy())


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=str)
def test_gradients_through_writes_to_parts_are_torchs(chunks):
    def program(a, b, lib):
        z = a + 1j * b
        z.imag.mul_(3)
        z.real[1:] = z.imag[:-1] * 2 - 1
        lib.view_as_real(z)[0, :, 1] = a[0] ** 2
        w = lib.view_as_complex(lib.view_as_real(z) * 2)
        return (w.real * z.imag).sum() + (w * w.conj()).real.sum() + z.abs().sum()

    a0, b0 = RNG.standard_normal((2, 4, 6))
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a0, b0))
    da_, db = (dg.from_array(v, chunks=chunks, requires_grad=True) for v in (a0, b0))
    program(ta, tb, torch).backward()
    out = program(da_, db, dg)
    out.backward()
    np.testing.assert_allclose(out.item(), program(ta.detach(), tb.detach(), torch).item(), rtol=1e-12)
    np.testing.assert_allclose(da_.grad.numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db.grad.numpy(), tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_a_complex_leafs_gradient_through_its_parts_is_torchs():
    tz = torch.from_numpy(Z.copy()).requires_grad_()
    dz = dg.from_array(Z.copy(), chunks=((1, 3), (1, 5)), requires_grad=True)
    for z, lib in ((tz, torch), (dz, dg)):
        (z.real * 2 + z.imag ** 2 + lib.view_as_real(z)[..., 0] * z.imag).sum().backward()
    np.testing.assert_allclose(dz.grad.numpy(), tz.grad.numpy(), rtol=1e-13)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        dz.real.zero_()


CASES = {  # (the tensor, torch's error) for view_as_real / view_as_complex of what they refuse
    "real of real": (lambda lib: lib.view_as_real(lib.zeros(3))),
    "complex of 3": (lambda lib: lib.view_as_complex(lib.zeros((3, 3)))),
    "complex of strided pairs": (lambda lib: lib.view_as_complex(lib.zeros((3, 2)).T.contiguous().T)),
    "complex of odd strides": (lambda lib: lib.view_as_complex(lib.zeros((4, 3))[:, 1:])),
    "complex of an odd offset": (lambda lib: lib.view_as_complex(lib.zeros(5)[1:].reshape(2, 2))),
    "complex of ints": (lambda lib: lib.view_as_complex(lib.zeros((4, 2), dtype=lib.int64))),
    "complex of 0-d": (lambda lib: lib.view_as_complex(lib.zeros(()))),
    "imag set on a real tensor": (lambda lib: setattr(lib.zeros(3), "imag", lib.zeros(3))),
    "real set of another shape": (lambda lib: setattr(lib.zeros(3, dtype=lib.complex128), "real", lib.ones(2))),
}


@pytest.mark.parametrize("case", CASES)
def test_what_the_views_refuse_they_refuse_with_torchs_words(case):
    with pytest.raises(RuntimeError) as expected:
        CASES[case](torch)
    with pytest.raises(RuntimeError) as got:
        CASES[case](dg)
    assert str(got.value) == str(expected.value)


def test_real_of_a_real_tensor_is_itself_and_its_set_writes_it():
    x = dg.arange(3.0)
    assert x.real is x and dg.real(x) is x
    x.real = dg.zeros(3)
    np.testing.assert_array_equal(x.numpy(), np.zeros(3))


def test_view_as_complex_of_pairs_split_across_chunks_and_a_0d_result():
    pairs = RNG.standard_normal((5, 2))
    d = dg.from_array(pairs.copy(), chunks=1)
    c = dg.view_as_complex(d)
    np.testing.assert_array_equal(c.numpy(), pairs[:, 0] + 1j * pairs[:, 1])
    c[2] = 7 - 1j
    np.testing.assert_array_equal(d.numpy()[2], [7, -1])
    assert dg.view_as_complex(dg.from_array(pairs[0].copy())).shape == ()
    assert dg.view_as_real(dg.from_array(np.array(1 + 2j))).numpy().tolist() == [1, 2]


def test_writes_to_parts_on_strict_device_chunks_stay_on_them():
    values = Z.copy()
    d = to_strict(dg.from_array(values.copy(), chunks=2))
    d.imag[1:, ::2] = -1.0
    d.real.mul_(2)
    r = dg.view_as_real(d)
    blocks = dask.compute(*d.array.to_delayed().ravel(), *r.array.to_delayed().ravel())
    assert all(isinstance(b, StrictArray) for b in blocks)
    values.imag[1:, ::2] = -1.0
    values.real *= 2
    host = d.array.map_blocks(lambda s: s.get(), meta=np.empty(0, values.dtype)).compute()
    np.testing.assert_array_equal(host, values)


def test_a_loop_writing_parts_gives_the_same_numbers_every_step_cached_or_not():
    def step(w):
        z = w * (1 + 0.5j)
        z.imag.clamp_(min=0)
        z.real[::2] = z.imag[::2] * 3
        loss = (dg.view_as_real(z) ** 2).sum()
        loss.backward()
        return loss.item(), w.grad.numpy().copy()

    w = dg.from_array(RNG.standard_normal((4, 6)), chunks=2, requires_grad=True)
    runs = []
    for _ in range(4):
        w.grad = None
        runs.append(step(w))
    info = dg.step_cache_info()
    for loss, grad in runs[1:]:
        assert loss == runs[0][0]
        np.testing.assert_array_equal(grad, runs[0][1])
    tw = torch.from_numpy(w.detach().numpy()).requires_grad_()
    z = tw * (1 + 0.5j)
    z.imag.clamp_(min=0)
    z.real[::2] = z.imag[::2] * 3
    (torch.view_as_real(z) ** 2).sum().backward()
    np.testing.assert_allclose(runs[0][1], tw.grad.numpy(), rtol=1e-13)
    assert info["hits"] >= 1
