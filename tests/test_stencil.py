"""correlate/convolve: same numbers as scipy.ndimage and torch's conv2d, gradients equal to torch's
across uneven chunks, and bad arguments refused before anything is submitted; roll (a periodic
stencil's shift): NumPy's values, torch's gradients, the array's own chunks."""
import numpy as np
import pytest

import daskgrad as dg

from conftest import leaf

MODES = ["constant", "reflect", "nearest", "wrap"]
CHUNKS = ((4, 1, 4), (2, 5))  # uneven, with a chunk narrower than the kernel's reach


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4), (5, 1)])
def test_correlate_and_convolve_match_scipy_in_every_boundary_mode(mode, shape, rng):
    ndimage = pytest.importorskip("scipy.ndimage")
    x, w = rng.standard_normal((9, 7)), rng.standard_normal(shape)
    t = leaf(x, CHUNKS, requires_grad=False)
    np.testing.assert_allclose(dg.correlate(t, w, mode=mode, cval=0.5).numpy(),
                               ndimage.correlate(x, w, mode=mode, cval=0.5))
    np.testing.assert_allclose(dg.convolve(t, w, mode=mode, origin=(0, -1) if shape[1] > 1 else 0).numpy(),
                               ndimage.convolve(x, w, mode=mode, origin=(0, -1) if shape[1] > 1 else 0))


@pytest.mark.parametrize("mode,torch_mode", [("constant", "constant"), ("nearest", "replicate"),
                                             ("wrap", "circular")])
def test_convolve_matches_torch_conv2d_values_and_gradients(mode, torch_mode, rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, w, v = rng.standard_normal((9, 7)), rng.standard_normal((3, 5)), rng.standard_normal((9, 7))
    t = leaf(x, CHUNKS)
    y = dg.convolve(t, w, mode=mode)
    (y * dg.tensor(v)).sum().backward()

    tx = torch.tensor(x, requires_grad=True)
    padded = F.pad(tx[None, None], (2, 2, 1, 1), mode=torch_mode)
    ty = F.conv2d(padded, torch.tensor(w).flip(0, 1)[None, None])[0, 0]  # conv2d correlates
    (ty * torch.tensor(v)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), atol=1e-12)
    assert t.grad.chunks == t.chunks


def test_convolve_keeps_float32_and_gradient_chunks(rng):
    t = dg.from_array(rng.standard_normal((10, 8)).astype(np.float32), chunks=((3, 7), (5, 3)), requires_grad=True)
    y = dg.convolve(t, np.ones((3, 3)) / 9, mode="reflect")
    assert y.dtype == np.float32 and y.grad_fn.name() == "ConvolutionBackward0"
    y.sum().backward()
    assert t.grad.dtype == np.float32 and t.grad.chunks == t.chunks
    # a 3x3 box sums to one: every interior cell's gradient is 1
    np.testing.assert_allclose(t.grad.numpy()[1:-1, 1:-1], 1, rtol=1e-6)


def test_stencil_adjoint_is_the_transpose_on_a_tiny_grid():
    """The whole Jacobian of a 'reflect' correlation, built from unit cotangents, is the transpose
    of the forward's matrix (so the halo fold sends each cotangent to the cell it was copied from)."""
    n, w = 5, np.array([[1.0, 2.0, 3.0]])
    basis = np.eye(n)
    forward = np.stack([dg.correlate(leaf(e[None], ((1,), (2, 3)), False), w, mode="reflect").numpy()[0]
                        for e in basis], axis=1)
    rows = []
    for e in basis:
        t = leaf(np.zeros((1, n)), ((1,), (2, 3)))
        (g,) = dg.grad(dg.correlate(t, w, mode="reflect"), [t], dg.tensor(e[None]))
        rows.append(g.numpy()[0])
    np.testing.assert_allclose(np.stack(rows, axis=1), forward.T)


def test_bad_stencil_arguments_raise_before_submitting():
    t = dg.ones(6, 4, chunks=2, requires_grad=True)
    with pytest.raises(RuntimeError, match="filter weights array has incorrect shape"):
        dg.correlate(t, np.ones(3))
    with pytest.raises(ValueError, match="boundary mode not supported: 'mirror'"):
        dg.correlate(t, np.ones((3, 3)), mode="mirror")
    with pytest.raises(ValueError, match="invalid origin"):
        dg.correlate(t, np.ones((3, 3)), origin=2)
    with pytest.raises(ValueError, match="reaches 5 cells past an axis of length 4"):
        dg.correlate(t, np.ones((1, 11)))
    with pytest.raises(NotImplementedError, match="the kernel must be a constant"):
        dg.convolve(t, dg.ones(3, 3, requires_grad=True))


def _wave_graph(steps, mode):
    """Tasks and dependency-free tasks of the gradient graph of ``steps`` 2-D wave-equation steps."""
    from dask.core import get_deps

    rng = np.random.default_rng(0)
    c = dg.from_array(0.2 + 0.05 * rng.random((12, 10)), chunks=(5, 4), requires_grad=True)
    u_prev = u = dg.from_array(rng.standard_normal((12, 10)), chunks=(5, 4))
    lap = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    for _ in range(steps):
        u_prev, u = u, 2 * u - u_prev + c ** 2 * dg.correlate(dg.tanh(u), lap, mode=mode)
    (g,) = dg.grad((u * u).sum(), c, lazy=True)
    dsk = dict(g.array.__dask_graph__())
    deps, _ = get_deps(dsk)
    return len(dsk), sum(1 for k in dsk if not deps[k])


def test_constant_boundary_steps_add_the_same_tasks_each_and_no_roots():
    """A step of a constant-boundary stencil adds a fixed number of tasks to the gradient's graph,
    and no task without inputs (its zero halo strips are shared by all steps, not made per step,
    so the scheduler holds none of them early per step)."""
    sizes = [_wave_graph(steps, "constant") for steps in (2, 4, 6)]
    tasks, roots = zip(*sizes)
    assert tasks[2] - tasks[1] == tasks[1] - tasks[0] > 0
    assert roots[0] == roots[1] == roots[2]


@pytest.mark.parametrize("mode", ["reflect", "nearest", "wrap"])
def test_stencil_gradient_graph_does_not_grow_with_the_array_length(mode):
    """The adjoint folds each halo strip back onto the array in a fixed number of tasks, whatever
    the length (padding a 1-cell strip to the axis' length made one chunk per cell)."""
    def tasks(n):
        x = dg.from_array(np.linspace(0, 1, n), chunks=n // 2, requires_grad=True)
        (g,) = dg.grad((dg.correlate(x, np.array([1.0, -2.0, 1.0]), mode=mode) ** 2).sum(), x, lazy=True)
        return len(g.array.__dask_graph__())

    assert tasks(2000) == tasks(40)


@pytest.mark.parametrize("mode", MODES)
def test_a_halo_is_one_task_a_chunk_and_axis_and_one_per_strip(mode):
    """9 x 8 in 3 x 2 chunks: each axis extends every chunk in one task (6 + 6) joining two strips,
    each one slicing task (a neighbour's edge cells, or the boundary rule's from the chunk itself):
    2 x 6 per axis.  dask's ``overlap`` made ~16 tasks a chunk."""
    x = dg.from_array(np.arange(72.0).reshape(9, 8), chunks=(3, 4))
    dsk = dict(dg.correlate(x, np.ones((3, 3)), mode=mode).array.__dask_graph__())
    halo = sum(1 for k in dsk if k[0].startswith("halo-"))
    assert halo == (6 + 2 * 6) * 2
    assert len(dsk) == 6 + halo + 6  # the chunks, the halo, one correlation a chunk


@pytest.mark.parametrize("mode", MODES)
def test_an_axis_of_one_chunk_extends_each_chunk_in_one_task_that_reads_only_it(mode):
    """9 x 8 in 3 x 1 chunks: axis 1 is one chunk, so its halo is one task a chunk reading only that
    chunk (fused into the chunk's task: a shot's wavefield on a cluster is one task a step, not
    five), while axis 0 keeps its strips; the values are scipy's."""
    from scipy import ndimage

    x = dg.from_array(np.arange(72.0).reshape(9, 8), chunks=(3, 8))
    y = dg.correlate(x, np.arange(9.0).reshape(3, 3), mode=mode)
    dsk = dict(y.array.__dask_graph__())
    halos = [k for k in dsk if k[0].startswith("halo-")]
    assert len(halos) == (3 + 2 * 3) + 3
    joins = [dsk[k] for k in halos if not k[0].startswith("halo-strip-")]
    one = [t for t in joins if len(t.dependencies) == 1]
    assert len(joins) == 6 and len(one) == 3  # axis 0's three join two strips each; axis 1's read a chunk
    assert all(len(k) == 3 and k[0].startswith("halo-") for t in one for k in t.dependencies)
    np.testing.assert_array_equal(y.numpy(), ndimage.correlate(np.arange(72.0).reshape(9, 8),
                                                               np.arange(9.0).reshape(3, 3), mode=mode))


def test_chunk_fusion_keeps_a_stencil_s_chunks_apart_not_one_task_for_all_bands():
    """Each chunk's halo reads two strips of one layer, which chunk fusion treats as a gather: a strip
    read alone fused each chunk with its neighbour, and 32 row bands of a wave equation ran as one
    task reading 791 MiB (a worker refused it)."""
    from daskgrad import _dask as door

    bands, steps = 8, 4
    rng = np.random.default_rng(0)
    c = dg.from_array(0.2 + 0.05 * rng.random((32, 6)), chunks=(4, 6), requires_grad=True)
    u_prev = u = dg.from_array(rng.standard_normal((32, 6)), chunks=(4, 6))
    lap = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    for _ in range(steps):
        u_prev, u = u, 2 * u - u_prev + c ** 2 * dg.correlate(u, lap, mode="constant")
    (g,) = dg.grad((u * u).sum(), c, lazy=True)
    (fused,) = door.optimize([g.array], fuse_chunks=True)
    dsk = dict(fused.__dask_graph__())
    assert len(dsk) >= bands * steps
    most = max(len({d[1] for d in getattr(node, "dependencies", ()) if isinstance(d, tuple) and len(d) >= 3})
               for node in dsk.values())
    assert most <= 3  # a chunk and its two neighbours at most
    np.testing.assert_allclose(fused.compute(), g.numpy())


ROLLS = [((1, 0)), ((-1, 1)), (((3, -8), (0, 1))), ((25, 0)), (((1, 1, -4), (0, 0, 1)))]


@pytest.mark.parametrize("shift,axis", ROLLS, ids=[repr(r) for r in ROLLS])
@pytest.mark.parametrize("chunks", [(9, 7), (3, 7), CHUNKS, (1, 1)], ids=["one", "even", "uneven", "size1"])
def test_roll_keeps_the_chunks_and_gives_numpy_s_values_and_torch_s_gradient(shift, axis, chunks, rng):
    # dask's roll left chunks such as (1, 4, 4) for (4, 4, 1): each next op with the array rechunked them
    # back, and a periodic stencil's step spent most of its time in those tasks
    torch = pytest.importorskip("torch")
    x, w = rng.standard_normal((9, 7)), rng.standard_normal((9, 7))
    t = leaf(x, chunks)
    y = dg.roll(t, shift, axis)
    assert y.chunks == t.chunks
    np.testing.assert_array_equal(y.detach().numpy(), np.roll(x, shift, axis))
    (y * dg.from_array(w, chunks=chunks)).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    (torch.roll(xt, shift, axis) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), xt.grad.numpy())
    assert dg.testing.gradcheck(lambda a: (dg.roll(a, shift, axis) ** 2).sum(), [leaf(x, chunks)])


def test_a_roll_is_one_task_a_chunk_reading_the_chunks_it_takes_from():
    from dask.utils import key_split

    t = dg.from_array(np.arange(32.0 * 32).reshape(32, 32), chunks=16)
    y = dg.roll(t, 1, 0).array
    mine = {k: v for k, v in dict(y.__dask_graph__()).items() if key_split(k) == "roll"}
    assert len(mine) == 4
    assert all(len(v.dependencies) == 2 for v in mine.values())  # the last row of the chunk above, and its own


def test_roll_on_chunks_that_refuse_host_conversion():
    from strict_array import StrictArray, to_strict

    x = np.arange(12.0).reshape(3, 4)
    t = to_strict(dg.from_array(x, chunks=2)).requires_grad_()
    y = dg.roll(t, (1, -3), (0, 1))
    assert isinstance(y.array._meta, StrictArray)
    np.testing.assert_array_equal(y.detach().numpy().get(), np.roll(x, (1, -3), (0, 1)))
    (y * y).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy().get(), 2 * x)
