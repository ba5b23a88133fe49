"""daskgrad.nn against torch.nn (float64, weights copied over), on batches in several chunks."""
import math

import numpy as np
import pytest

import daskgrad as dg
from daskgrad import nn
from daskgrad.nn import functional as F


def _to_torch(torch, module, tmodule):
    tmodule.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in module.state_dict().items()})
    return tmodule


def _check_against_torch(torch, module, tmodule, x, *extra):
    """Forward values and every gradient (input and parameters) equal torch's."""
    tmodule = _to_torch(torch, module, tmodule.double())
    xd = dg.from_array(x, chunks=((3, 3, 1),) + tuple((n,) for n in x.shape[1:]), requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    out, tout = module(xd, *extra), tmodule(xt, *[torch.tensor(e.detach().numpy()) for e in extra])
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-9, atol=1e-12)
    weights = np.random.default_rng(1).standard_normal(tout.shape)
    (out * dg.from_array(weights, chunks=out.chunks)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    for (name, p), tp in zip(module.named_parameters(), tmodule.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


MODULES = {
    "Linear": (lambda m: m.Linear(4, 3, **_f64(m)), (7, 4)),
    "Linear_nobias": (lambda m: m.Linear(4, 2, bias=False, **_f64(m)), (7, 4)),
    "ReLU": (lambda m: m.ReLU(), (7, 4)),
    "Tanh": (lambda m: m.Tanh(), (7, 4)),
    "Sigmoid": (lambda m: m.Sigmoid(), (7, 4)),
    "GELU": (lambda m: m.GELU(), (7, 4)),
    "GELU_tanh": (lambda m: m.GELU(approximate="tanh"), (7, 4)),
    "LayerNorm": (lambda m: m.LayerNorm(4, **_f64(m)), (7, 4)),
    "LayerNorm_2d": (lambda m: m.LayerNorm((3, 4), eps=1e-3, **_f64(m)), (7, 3, 4)),
    "LayerNorm_no_affine": (lambda m: m.LayerNorm(4, elementwise_affine=False, **_f64(m)), (7, 4)),
    "Sequential": (lambda m: m.Sequential(m.Linear(4, 5, **_f64(m)), m.GELU(), m.LayerNorm(5, **_f64(m)),
                                          m.Dropout(0.3), m.Linear(5, 2, **_f64(m))), (7, 4)),
}


def _f64(m):
    return {"dtype": "float64"} if m is nn else {}


@pytest.mark.parametrize("name", list(MODULES))
def test_module_forward_and_gradients_equal_torch(name):
    torch = pytest.importorskip("torch")
    make, shape = MODULES[name]
    module = make(nn).eval() if name == "Sequential" else make(nn)
    tmodule = make(torch.nn).eval() if name == "Sequential" else make(torch.nn)
    x = np.random.default_rng(0).standard_normal(shape)
    _check_against_torch(torch, module, tmodule, x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss"])
def test_loss_values_and_gradients_equal_torch(loss, reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3))
    target = rng.integers(0, 3, 7) if loss == "CrossEntropyLoss" else rng.uniform(size=(7, 3))
    t = dg.from_array(target, chunks=3)
    _check_against_torch(torch, getattr(nn, loss)(reduction=reduction), getattr(torch.nn, loss)(reduction=reduction),
                         x, t)


def test_embedding_lookup_and_scatter_add_gradient_equal_torch():
    torch = pytest.importorskip("torch")
    emb, temb = nn.Embedding(5, 3, dtype="float64"), torch.nn.Embedding(5, 3).double()
    _to_torch(torch, emb, temb)
    idx = np.array([[0, 4, 4], [2, 0, 1], [4, 4, 4], [3, 1, 0]])
    out, tout = emb(dg.from_array(idx, chunks=(3, 2))), temb(torch.tensor(idx))
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    w = np.random.default_rng(0).standard_normal(tout.shape)
    (out * dg.from_array(w, chunks=out.chunks)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy(), temb.weight.grad.numpy(), rtol=1e-12)


def test_default_initialisations_follow_torch():
    dg.manual_seed(0)
    lin = nn.Linear(16, 400)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    assert lin.weight.dtype == np.float32 and lin.weight.chunks == ((400,), (16,))
    assert np.abs(w).max() <= 1 / math.sqrt(16) and np.abs(w).max() > 0.9 / math.sqrt(16)
    assert np.abs(b).max() <= 1 / math.sqrt(16) and abs(w.mean()) < 0.02
    e = nn.Embedding(1000, 8).weight.detach().numpy()
    assert abs(e.mean()) < 0.05 and abs(e.std() - 1) < 0.05
    ln = nn.LayerNorm(6)
    assert (ln.weight.detach().numpy() == 1).all() and (ln.bias.detach().numpy() == 0).all()
    dg.manual_seed(0)
    assert (nn.Linear(16, 400).weight.detach().numpy() == w).all()


def test_dropout_masks_chunkwise_reproducible_and_identity_in_eval():
    x = dg.ones(40, 50, dtype="float64", chunks=(10, 25))
    drop = nn.Dropout(0.25)
    dg.manual_seed(3)
    a = drop(x).numpy()
    dg.manual_seed(3)
    b = drop(x).numpy()
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) == {0.0, 1 / 0.75}
    assert 0.18 < (a == 0).mean() < 0.32
    assert not (a[:10, :25] == a[10:20, :25]).all()  # each chunk draws its own mask
    assert drop.eval()(x) is x and not drop.training
    assert (F.dropout(x, 1.0).numpy() == 0).all() and F.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)
    y = x.detach().requires_grad_()
    out = drop.train()(y)
    out.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), (out.detach().numpy() != 0) / 0.75)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.head = nn.Linear(4, 1)
        self.scale = nn.Parameter(np.ones(1, dtype=np.float32))
        self.tied = self.head  # the same module twice: walks list it once, state_dict under both names

    def forward(self, x):
        return self.head(self.body(x)) * self.scale


def test_module_registration_walks_and_modes():
    net = _Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "head.weight", "head.bias"]
    assert [n for n, _ in net.named_children()] == ["body", "head"]
    assert [n for n, _ in net.named_modules()] == ["", "body", "body.0", "body.1", "head"]
    assert isinstance(net.scale, nn.Parameter) and net.scale.is_leaf and net.scale.requires_grad
    assert net.training and not any(m.training for m in net.eval().modules())
    with pytest.raises(TypeError, match="cannot assign 'int' as parameter 'scale'"):
        net.scale = 3
    with pytest.raises(AttributeError, match="'_Net' object has no attribute 'nope'"):
        net.nope
    assert repr(net.body) == ("Sequential(\n  (0): Linear(in_features=3, out_features=4, bias=True)\n"
                              "  (1): ReLU()\n)")
    net(dg.ones(5, 3, chunks=2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_load_state_dict_checks_keys_with_torch_error_text():
    net = _Net()
    sd = net.state_dict()
    assert list(sd) == ["scale", "body.0.weight", "body.0.bias", "head.weight", "head.bias", "tied.weight",
                        "tied.bias"]
    assert not sd["scale"].requires_grad
    bad = dict(sd)
    del bad["head.bias"]
    bad["extra"] = np.zeros(2)
    with pytest.raises(RuntimeError) as err:
        net.load_state_dict(bad)
    assert str(err.value) == ('Error(s) in loading state_dict for _Net:\n\tMissing key(s) in state_dict: '
                              '"head.bias". \n\tUnexpected key(s) in state_dict: "extra". ')
    result = net.load_state_dict(bad, strict=False)
    assert result.missing_keys == ["head.bias"] and result.unexpected_keys == ["extra"]
    with pytest.raises(RuntimeError, match=r"size mismatch for head.bias: copying a param with shape "
                                           r"torch.Size\(\[2\]\) from checkpoint, the shape in current model is "
                                           r"torch.Size\(\[1\]\)."):
        net.load_state_dict({**sd, "head.bias": np.zeros(2)})
    other = _Net()
    other.load_state_dict({k: v.numpy() for k, v in sd.items()})
    for p, q in zip(net.parameters(), other.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_erf_without_scipy_matches_math_erf_to_a_few_ulp():
    from daskgrad.ops.layers import _erf_ufuncs

    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, 1e-300, -1e-8, 2.9999999, 3.0, 5.99, 6.0, 30.0]])
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(_erf_ufuncs(x), expected, rtol=4e-15, atol=0)
    assert _erf_ufuncs(np.float32(0.5) * np.ones(3, dtype=np.float32)).dtype == np.float32
