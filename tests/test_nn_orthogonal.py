"""``nn.utils.parametrizations.orthogonal`` and ``linalg.householder_product`` against torch 2.13 in float64 and
complex128: every map (``matrix_exp``, ``cayley``, ``householder``) with and without the trivialization, on square,
tall, wide and batched weights, over one, even and uneven chunkings of the input batch; values, gradients,
state_dict keys, reprs, assignment through ``right_inverse`` and errors.  Cases follow torch's
test/nn/test_parametrization.py (``test_orthogonal_parametrization``)."""
import numpy as np
import pytest

import daskgrad as dg
import daskgrad.nn as nn

torch = pytest.importorskip("torch")



def orthogonal(module, *args, **kwargs):
    """torch's ``orthogonal`` on a torch module, ours on ours."""
    lib = torch if isinstance(module, torch.nn.Module) else dg
    return lib.nn.utils.parametrizations.orthogonal(module, *args, **kwargs)


CHUNKINGS = {"one": 6, "even": 3, "uneven": 4}  # of a batch of 6
MAPS = [None, "matrix_exp", "cayley", "householder"]


def _holder(m, W):
    """A module whose parameter ``weight`` is ``W`` (any shape: torch's test parametrizes batches of matrices)."""
    class Holder(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = m.nn.Parameter(m.tensor(W))
    return Holder()


def _load(ours, theirs):
    """torch's state (the random ``base`` of a non-square weight included) into ours."""
    ours.load_state_dict({k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})


def _close(ours, theirs, tol=1e-12):
    ours = ours.detach() if isinstance(ours, dg.Tensor) else ours
    np.testing.assert_allclose(np.asarray(ours), theirs.detach().numpy(), rtol=1e-10, atol=tol)


def _raises_as_torch(ours, theirs):
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(want.type) as got:
        ours()
    assert str(got.value) == str(want.value).replace("torch.Size(", "daskgrad.Size(")


def _orthonormal(Q):
    """torch's check: ``Q^H Q = I`` (tall) or ``Q Q^H = I`` (wide), each matrix of the batch."""
    Q = np.asarray(Q.detach())
    if Q.shape[-2] < Q.shape[-1]:
        Q = np.swapaxes(Q, -1, -2)
    gram = np.conj(np.swapaxes(Q, -1, -2)) @ Q
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(Q.shape[-1]), gram.shape), atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
@pytest.mark.parametrize("orthogonal_map", MAPS[1:])  # (None is one of them: test_orthogonal_default_map_is_torchs)
@pytest.mark.parametrize("use_trivialization", [True, False])
def test_orthogonal_linear_computes_torchs_weight_output_and_gradients(shape, orthogonal_map, use_trivialization):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    t = torch.nn.Linear(shape[1], shape[0]).double()
    d = nn.Linear(shape[1], shape[0]).double()
    _load(d, t)
    orthogonal(t, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    orthogonal(d, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    assert list(d.state_dict()) == list(t.state_dict())
    assert repr(d) == repr(t)
    _orthonormal(d.weight)  # its own initial value (a non-square one completed with our random columns)
    _load(d, t)
    _close(d.weight, t.weight)
    x = rng.standard_normal((6, shape[1]))
    cot = rng.standard_normal((6, shape[0]))
    yt = t(torch.tensor(x))
    (yt * torch.tensor(cot)).sum().backward()
    for chunking in CHUNKINGS:
        d.zero_grad()
        yd = d(dg.from_array(x, chunks=(CHUNKINGS[chunking], shape[1])))
        (yd * dg.tensor(cot)).sum().backward()
        _close(yd, yt)
        _close(d.parametrizations.weight.original.grad, t.parametrizations.weight.original.grad)
        _close(d.bias.grad, t.bias.grad)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
@pytest.mark.parametrize("orthogonal_map", MAPS)
@pytest.mark.parametrize("use_trivialization", [True, False])
def test_assigning_a_matrix_goes_through_right_inverse_as_torchs(shape, orthogonal_map, use_trivialization):
    torch.manual_seed(0)
    W = np.random.default_rng(1).standard_normal(shape)
    t = orthogonal(torch.nn.Linear(shape[1], shape[0]).double(), orthogonal_map=orthogonal_map,
                   use_trivialization=use_trivialization)
    d = orthogonal(nn.Linear(shape[1], shape[0]).double(), orthogonal_map=orthogonal_map,
                   use_trivialization=use_trivialization)
    square_or_householder = shape[0] == shape[1] or orthogonal_map in (None, "householder")

    def assign(m, module, value):
        with m.no_grad():
            module.weight = m.tensor(value)

    if not use_trivialization and orthogonal_map in ("matrix_exp", "cayley") or \
            not use_trivialization and orthogonal_map is None and shape[0] == shape[1]:
        _raises_as_torch(lambda: assign(dg, d, W), lambda: assign(torch, t, W))
        return
    assign(torch, t, W)
    assign(dg, d, W)
    _orthonormal(d.weight)
    _close(d.parametrizations.weight.original, t.parametrizations.weight.original)
    # the first columns (rows) of a completed base depend on W only: the weight is torch's
    _close(d.weight, t.weight)
    assert square_or_householder or use_trivialization
    # an orthogonal matrix is kept as it is
    assign(dg, d, d.weight.detach().numpy())
    _close(d.weight, t.weight)


@pytest.mark.parametrize("W", [np.random.default_rng(2).standard_normal((2, 4, 3)),
                               np.random.default_rng(3).standard_normal((3, 3)) * (1 + 0.5j),
                               np.random.default_rng(4).standard_normal((2, 3, 5)) * (0.5 - 1j)],
                         ids=["batch-real", "square-complex", "batch-wide-complex"])
@pytest.mark.parametrize("orthogonal_map", MAPS)
@pytest.mark.parametrize("use_trivialization", [True, False])
def test_batches_and_complex_weights_are_torchs(W, orthogonal_map, use_trivialization):
    torch.manual_seed(0)
    t, d = _holder(torch, W), _holder(dg, W)
    if np.iscomplexobj(W) and orthogonal_map == "householder":
        _raises_as_torch(lambda: orthogonal(d, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization),
                         lambda: orthogonal(t, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization))
        return
    orthogonal(t, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    orthogonal(d, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    assert list(d.state_dict()) == list(t.state_dict())
    _orthonormal(d.weight)
    _load(d, t)
    cot = np.random.default_rng(5).standard_normal(W.shape)
    (t.weight * torch.tensor(cot)).real.sum().backward()
    (d.weight * dg.tensor(cot)).real.sum().backward()
    _close(d.weight, t.weight)
    _close(d.parametrizations.weight.original.grad, t.parametrizations.weight.original.grad)


def test_orthogonal_errors_are_torchs():
    def both(fn):
        _raises_as_torch(lambda: fn(dg), lambda: fn(torch))

    both(lambda m: orthogonal(m.nn.Linear(3, 3), name="bias"))
    both(lambda m: orthogonal(m.nn.Linear(3, 3), name="nothing"))
    both(lambda m: orthogonal(m.nn.Linear(3, 3), orthogonal_map="qr"))
    both(lambda m: orthogonal(_holder(m, np.ones((2, 2), dtype=complex)), orthogonal_map="householder"))

    def wrong_shape(m):
        lin = orthogonal(m.nn.Linear(3, 4).double())
        with m.no_grad():
            lin.weight = m.zeros(3, 4, dtype=m.float64)
    both(wrong_shape)


def test_orthogonal_default_map_is_torchs():
    assert orthogonal(nn.Linear(3, 3)).parametrizations.weight[0].orthogonal_map.name == "matrix_exp"
    assert orthogonal(nn.Linear(3, 5)).parametrizations.weight[0].orthogonal_map.name == "householder"
    assert orthogonal(_holder(dg, np.ones((3, 2), dtype=complex))).parametrizations.weight[0] \
        .orthogonal_map.name == "matrix_exp"


def test_orthogonal_trains_staying_orthogonal():
    """torch's use: an optimizer step on ``original`` leaves the weight orthogonal."""
    dg.manual_seed(0)
    lin = orthogonal(nn.Linear(4, 6).double())
    opt = dg.optim.SGD(lin.parameters(), lr=0.1)
    x = dg.randn(6, 4, dtype="float64", chunks=(3, 4))
    for _ in range(2):
        opt.zero_grad()
        (lin(x) ** 2).sum().backward()
        opt.step()
    _orthonormal(lin.weight)


@pytest.mark.parametrize("shape,k", [((4, 3), 2), ((4, 3), 3), ((2, 5, 3), 3), ((3, 3), 3), ((4, 3), 0)])
def test_householder_product_is_torchs_with_gradients(shape, k):
    rng = np.random.default_rng(0)
    a, tau = rng.standard_normal(shape), rng.random(shape[:-2] + (k,))
    ta, tt = torch.tensor(a, requires_grad=True), torch.tensor(tau, requires_grad=True)
    da, dt = dg.tensor(a, requires_grad=True), dg.tensor(tau, requires_grad=True)
    qt, qd = torch.linalg.householder_product(ta, tt), dg.linalg.householder_product(da, dt)
    _close(qd, qt)
    cot = rng.standard_normal(qt.shape)
    (qt * torch.tensor(cot)).sum().backward()
    (qd * dg.tensor(cot)).sum().backward()
    if k:
        _close(da.grad, ta.grad)
        _close(dt.grad, tt.grad)
    else:  # no reflector: torch's backward leaves the gradients undefined, as ours
        assert ta.grad is None and da.grad is None and tt.grad is None and dt.grad is None


def test_householder_product_of_complex_reflectors_is_torchs():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    tau = rng.random(3) + 1j * rng.random(3)
    _close(dg.linalg.householder_product(dg.tensor(a), dg.tensor(tau)),
           torch.linalg.householder_product(torch.tensor(a), torch.tensor(tau)))


@pytest.mark.parametrize("a,tau", [((3,), (1,)), ((2, 3), (1,)), ((3, 2), (3,)), ((2, 3, 2), (3, 2)),
                                   ((3, 2), (2, 1))])
def test_householder_product_errors_are_torchs(a, tau):
    _raises_as_torch(lambda: dg.linalg.householder_product(dg.ones(*a, dtype="float64"), dg.ones(*tau,
                                                                                                dtype="float64")),
                     lambda: torch.linalg.householder_product(torch.ones(*a, dtype=torch.float64),
                                                              torch.ones(*tau, dtype=torch.float64)))
    _raises_as_torch(lambda: dg.linalg.householder_product(dg.ones(3, 2, dtype="float64"), dg.ones(2)),
                     lambda: torch.linalg.householder_product(torch.ones(3, 2, dtype=torch.float64), torch.ones(2)))
